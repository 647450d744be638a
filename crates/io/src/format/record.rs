//! Format 2's per-slot record (32 bytes), encoded and decoded.

use super::{
    get_u16, get_u32, get_u64, put_u32, put_u64, RECORD_BYTES, RECORD_FLAG_DIRTY, RECORD_FLAG_USED,
    RECORD_MAGIC, RECORD_VERSION,
};
use wcache_core::types::PageKey;
use wcache_core::SlotRecord;

/// What one record slot holds, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// All zeros.
    Free,
    Used {
        record: SlotRecord,
        data_crc32c: u32,
    },
}

/// Why a record does not decode (the slot is then treated as free).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("record magic {0:#06x} is not {RECORD_MAGIC:#06x}")]
    Magic(u16),
    #[error("record version {0} is not {RECORD_VERSION}")]
    Version(u8),
    #[error("record flags {0:#04x}: unknown bits, or dirty without used")]
    Flags(u8),
    #[error("record names slot {found}, but it is stored at slot {at}")]
    Misplaced { found: u32, at: u32 },
}

/// Encodes slot `slot`'s record into `out` (32 bytes).
pub fn encode_record(out: &mut [u8], slot: u32, record: &SlotRecord, data_crc32c: u32) {
    assert_eq!(out.len(), RECORD_BYTES as usize, "record buffer");
    out[0..2].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    out[2] = RECORD_VERSION;
    out[3] = RECORD_FLAG_USED | if record.dirty { RECORD_FLAG_DIRTY } else { 0 };
    put_u32(out, 4, data_crc32c);
    put_u64(out, 8, record.key.0);
    put_u64(out, 16, record.seq);
    put_u32(out, 24, slot);
    let crc = crate::checksum::crc32c(&out[..28]);
    put_u32(out, 28, crc);
}

/// Decodes the 32 bytes of the record stored for slot `slot`.
pub fn decode_record(b: &[u8], slot: u32) -> Result<RecordState, RecordError> {
    assert_eq!(b.len(), RECORD_BYTES as usize, "record buffer");
    if b.iter().all(|&c| c == 0) {
        return Ok(RecordState::Free);
    }
    let stored = get_u32(b, 28);
    let computed = crate::checksum::crc32c(&b[..28]);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    let magic = get_u16(b, 0);
    if magic != RECORD_MAGIC {
        return Err(RecordError::Magic(magic));
    }
    if b[2] != RECORD_VERSION {
        return Err(RecordError::Version(b[2]));
    }
    let flags = b[3];
    if flags & !(RECORD_FLAG_USED | RECORD_FLAG_DIRTY) != 0 || flags & RECORD_FLAG_USED == 0 {
        return Err(RecordError::Flags(flags));
    }
    let found = get_u32(b, 24);
    if found != slot {
        return Err(RecordError::Misplaced { found, at: slot });
    }
    Ok(RecordState::Used {
        record: SlotRecord {
            key: PageKey(get_u64(b, 8)),
            seq: get_u64(b, 16),
            dirty: flags & RECORD_FLAG_DIRTY != 0,
        },
        data_crc32c: get_u32(b, 4),
    })
}
