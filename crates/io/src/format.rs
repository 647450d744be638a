//! The on-device format of a persistent cache device, as pure encoding and
//! decoding (no I/O): the superblock, the per-slot records and the layout
//! that places them. `docs/on-disk-format.md` describes the same bytes; the
//! two must change together (bump `FORMAT_VERSION`).
//!
//! Layout: superblock (4 KiB at offset 0), record area (32 bytes per slot,
//! rounded up to whole 4 KiB blocks), data area (slot i at
//! `data_offset_bytes + i * page_size_bytes`, aligned to the page and to 4 KiB).
//! All integers are little-endian. Every structure carries a crc32c.
//! This module must never guess: a field that does not decode is an error
//! that names the field.

use wcache_core::types::PageKey;
use wcache_core::SlotRecord;

/// Superblock magic, the first 8 bytes of a formatted cache device.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"WCACHEsb";
pub const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// The unit in which records are written (one in-memory copy per block).
pub const RECORD_BLOCK_BYTES: u64 = 4096;
pub const RECORD_BYTES: u64 = 32;
pub const RECORDS_PER_BLOCK: u64 = RECORD_BLOCK_BYTES / RECORD_BYTES;
pub const RECORD_MAGIC: u16 = 0x5257; // "WR"
pub const RECORD_VERSION: u8 = 1;
pub const RECORD_FLAG_USED: u8 = 1;
pub const RECORD_FLAG_DIRTY: u8 = 2;

pub const VOLUME_ENTRY_BYTES: usize = 256;
pub const VOLUME_NAME_BYTES_MAX: usize = 64;
pub const VOLUME_IDENTITY_BYTES_MAX: usize = 184;
const VOLUME_TABLE_OFFSET_BYTES: usize = 128;
/// Volumes the superblock's table holds.
pub const VOLUMES_MAX: usize = 15;
const SUPERBLOCK_CRC_OFFSET_BYTES: usize = SUPERBLOCK_BYTES as usize - 4;

pub const SUPERBLOCK_FLAG_CLEAN: u32 = 1;

const _: () = assert!(RECORD_BLOCK_BYTES.is_multiple_of(RECORD_BYTES));
const _: () = assert!(
    512u64.is_multiple_of(RECORD_BYTES),
    "a record never crosses a sector"
);
const _: () = assert!(
    VOLUME_TABLE_OFFSET_BYTES + VOLUMES_MAX * VOLUME_ENTRY_BYTES <= SUPERBLOCK_CRC_OFFSET_BYTES
);
const _: () = assert!(VOLUME_NAME_BYTES_MAX + 8 + VOLUME_IDENTITY_BYTES_MAX == VOLUME_ENTRY_BYTES);

/// Why a superblock or record does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no wcache superblock (magic is {found:02x?}, expected {SUPERBLOCK_MAGIC:02x?}); is this a cache device? (a new one is formatted only when it is all zeros)")]
    BadMagic { found: [u8; 8] },
    #[error("superblock format version {found}, this wcache reads version {FORMAT_VERSION}")]
    BadVersion { found: u32 },
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the superblock is corrupt")]
    BadSuperblockChecksum { stored: u32, computed: u32 },
    #[error("superblock field {field} = {value} is invalid: {why}")]
    BadField {
        field: &'static str,
        value: u64,
        why: &'static str,
    },
    #[error("volume {index} in the superblock: {why}")]
    BadVolume { index: usize, why: &'static str },
    #[error("{count} volumes do not fit the superblock (at most {VOLUMES_MAX})")]
    TooManyVolumes { count: usize },
    #[error("volume name {name:?} is longer than {VOLUME_NAME_BYTES_MAX} bytes")]
    NameTooLong { name: String },
    #[error("cache device of {size_bytes} bytes is too small for one {page_size_bytes}-byte slot after its metadata")]
    DeviceTooSmall {
        size_bytes: u64,
        page_size_bytes: u64,
    },
}

/// Where each area lies on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub page_size_bytes: u64,
    pub slot_count: u64,
    pub record_offset_bytes: u64,
    pub record_area_bytes: u64,
    pub data_offset_bytes: u64,
}

impl Layout {
    /// The most slots of `page_size_bytes` that fit a device of `size_bytes`
    /// with their records.
    pub fn for_device(size_bytes: u64, page_size_bytes: u64) -> Result<Layout, FormatError> {
        let too_small = FormatError::DeviceTooSmall {
            size_bytes,
            page_size_bytes,
        };
        if page_size_bytes == 0 {
            return Err(too_small);
        }
        let mut slots = size_bytes / page_size_bytes;
        loop {
            let layout = Layout::with_slots(page_size_bytes, slots);
            let end = layout.end_bytes();
            if end <= size_bytes {
                // The step below may overshoot by a few slots: take them back.
                let mut best = layout;
                loop {
                    let more = Layout::with_slots(page_size_bytes, best.slot_count + 1);
                    if more.end_bytes() > size_bytes {
                        break;
                    }
                    best = more;
                }
                if best.slot_count == 0 {
                    return Err(too_small);
                }
                return Ok(best);
            }
            let over_pages = (end - size_bytes).div_ceil(page_size_bytes);
            if over_pages >= slots {
                return Err(too_small);
            }
            slots -= over_pages;
        }
    }

    pub fn with_slots(page_size_bytes: u64, slot_count: u64) -> Layout {
        let record_offset_bytes = SUPERBLOCK_BYTES;
        let record_area_bytes = (slot_count * RECORD_BYTES).next_multiple_of(RECORD_BLOCK_BYTES);
        let align = page_size_bytes.max(RECORD_BLOCK_BYTES);
        let data_offset_bytes = (record_offset_bytes + record_area_bytes).next_multiple_of(align);
        Layout {
            page_size_bytes,
            slot_count,
            record_offset_bytes,
            record_area_bytes,
            data_offset_bytes,
        }
    }

    pub fn end_bytes(&self) -> u64 {
        self.data_offset_bytes + self.slot_count * self.page_size_bytes
    }

    pub fn slot_offset_bytes(&self, slot: u32) -> u64 {
        self.data_offset_bytes + slot as u64 * self.page_size_bytes
    }

    pub fn record_blocks(&self) -> u64 {
        self.record_area_bytes / RECORD_BLOCK_BYTES
    }
}

/// One volume the cache serves, as the superblock names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeEntry {
    /// The export name.
    pub name: String,
    pub size_bytes: u64,
    /// What the backing is (canonical path, NBD URI, …), to refuse another
    /// backing under the same name. Long identities are shortened with a checksum.
    pub identity: String,
}

impl VolumeEntry {
    pub fn new(name: &str, size_bytes: u64, identity: &str) -> Result<VolumeEntry, FormatError> {
        if name.len() > VOLUME_NAME_BYTES_MAX {
            return Err(FormatError::NameTooLong {
                name: name.to_string(),
            });
        }
        Ok(VolumeEntry {
            name: name.to_string(),
            size_bytes,
            identity: shorten_identity(identity),
        })
    }
}

/// Identities longer than the field keep a prefix and the crc32c of the whole.
fn shorten_identity(identity: &str) -> String {
    if identity.len() <= VOLUME_IDENTITY_BYTES_MAX {
        return identity.to_string();
    }
    let suffix = format!("…#{:08x}", crc32c::crc32c(identity.as_bytes()));
    let mut cut = VOLUME_IDENTITY_BYTES_MAX - suffix.len();
    while !identity.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &identity[..cut])
}

/// The superblock's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: [u8; 16],
    pub layout: Layout,
    /// Set by a clean shutdown, cleared when a server opens the cache.
    pub clean: bool,
    /// How many times the cache was opened for service (each open bumps it).
    pub open_count: u64,
    pub volumes: Vec<VolumeEntry>,
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A NUL-padded UTF-8 string field.
fn get_str(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    if b[end..].iter().any(|&c| c != 0) {
        return None;
    }
    String::from_utf8(b[..end].to_vec()).ok()
}

impl Superblock {
    pub fn encode(&self) -> Result<[u8; SUPERBLOCK_BYTES as usize], FormatError> {
        if self.volumes.len() > VOLUMES_MAX {
            return Err(FormatError::TooManyVolumes {
                count: self.volumes.len(),
            });
        }
        let mut b = [0u8; SUPERBLOCK_BYTES as usize];
        b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(
            &mut b,
            12,
            if self.clean { SUPERBLOCK_FLAG_CLEAN } else { 0 },
        );
        b[16..32].copy_from_slice(&self.uuid);
        let l = &self.layout;
        put_u64(&mut b, 32, l.page_size_bytes);
        put_u64(&mut b, 40, l.slot_count);
        put_u64(&mut b, 48, l.record_offset_bytes);
        put_u64(&mut b, 56, l.record_area_bytes);
        put_u64(&mut b, 64, l.data_offset_bytes);
        put_u64(&mut b, 72, self.open_count);
        put_u32(&mut b, 80, self.volumes.len() as u32);
        for (i, v) in self.volumes.iter().enumerate() {
            let at = VOLUME_TABLE_OFFSET_BYTES + i * VOLUME_ENTRY_BYTES;
            if v.name.len() > VOLUME_NAME_BYTES_MAX {
                return Err(FormatError::NameTooLong {
                    name: v.name.clone(),
                });
            }
            b[at..at + v.name.len()].copy_from_slice(v.name.as_bytes());
            put_u64(&mut b, at + VOLUME_NAME_BYTES_MAX, v.size_bytes);
            let id = shorten_identity(&v.identity);
            let id_at = at + VOLUME_NAME_BYTES_MAX + 8;
            b[id_at..id_at + id.len()].copy_from_slice(id.as_bytes());
        }
        let crc = crc32c::crc32c(&b[..SUPERBLOCK_CRC_OFFSET_BYTES]);
        put_u32(&mut b, SUPERBLOCK_CRC_OFFSET_BYTES, crc);
        Ok(b)
    }

    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        assert!(b.len() >= SUPERBLOCK_BYTES as usize, "superblock buffer");
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[0..8]);
        if magic != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = get_u32(b, 8);
        if version != FORMAT_VERSION {
            return Err(FormatError::BadVersion { found: version });
        }
        let stored = get_u32(b, SUPERBLOCK_CRC_OFFSET_BYTES);
        let computed = crc32c::crc32c(&b[..SUPERBLOCK_CRC_OFFSET_BYTES]);
        if stored != computed {
            return Err(FormatError::BadSuperblockChecksum { stored, computed });
        }
        let flags = get_u32(b, 12);
        if flags & !SUPERBLOCK_FLAG_CLEAN != 0 {
            return Err(FormatError::BadField {
                field: "flags",
                value: flags as u64,
                why: "unknown flag bits",
            });
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[16..32]);
        let page = get_u64(b, 32);
        if page == 0 || !page.is_power_of_two() || page < 512 {
            return Err(FormatError::BadField {
                field: "page_size_bytes",
                value: page,
                why: "not a power of two of at least 512",
            });
        }
        let slots = get_u64(b, 40);
        if slots == 0 || slots >= u32::MAX as u64 {
            return Err(FormatError::BadField {
                field: "slot_count",
                value: slots,
                why: "must be between 1 and 2^32 - 2",
            });
        }
        let layout = Layout::with_slots(page, slots);
        let check = |field, value: u64, expect: u64| {
            if value == expect {
                Ok(())
            } else {
                Err(FormatError::BadField {
                    field,
                    value,
                    why: "does not match the layout computed from page size and slot count",
                })
            }
        };
        check(
            "record_offset_bytes",
            get_u64(b, 48),
            layout.record_offset_bytes,
        )?;
        check(
            "record_area_bytes",
            get_u64(b, 56),
            layout.record_area_bytes,
        )?;
        check(
            "data_offset_bytes",
            get_u64(b, 64),
            layout.data_offset_bytes,
        )?;
        let count = get_u32(b, 80) as usize;
        if count > VOLUMES_MAX {
            return Err(FormatError::BadField {
                field: "volume_count",
                value: count as u64,
                why: "more than the table holds",
            });
        }
        let mut volumes = Vec::with_capacity(count);
        for index in 0..count {
            let at = VOLUME_TABLE_OFFSET_BYTES + index * VOLUME_ENTRY_BYTES;
            let name =
                get_str(&b[at..at + VOLUME_NAME_BYTES_MAX]).ok_or(FormatError::BadVolume {
                    index,
                    why: "name is not NUL-padded UTF-8",
                })?;
            let id_at = at + VOLUME_NAME_BYTES_MAX + 8;
            let identity = get_str(&b[id_at..id_at + VOLUME_IDENTITY_BYTES_MAX]).ok_or(
                FormatError::BadVolume {
                    index,
                    why: "backing identity is not NUL-padded UTF-8",
                },
            )?;
            volumes.push(VolumeEntry {
                name,
                size_bytes: get_u64(b, at + VOLUME_NAME_BYTES_MAX),
                identity,
            });
        }
        Ok(Superblock {
            uuid,
            layout,
            clean: flags & SUPERBLOCK_FLAG_CLEAN != 0,
            open_count: get_u64(b, 72),
            volumes,
        })
    }

    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// A version-4 style UUID from the process's random hasher keys, the time and the pid.
pub fn new_uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.write_u32(std::process::id());
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

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
    let crc = crc32c::crc32c(&out[..28]);
    put_u32(out, 28, crc);
}

/// Decodes the 32 bytes of the record stored for slot `slot`.
pub fn decode_record(b: &[u8], slot: u32) -> Result<RecordState, RecordError> {
    assert_eq!(b.len(), RECORD_BYTES as usize, "record buffer");
    if b.iter().all(|&c| c == 0) {
        return Ok(RecordState::Free);
    }
    let stored = get_u32(b, 28);
    let computed = crc32c::crc32c(&b[..28]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_core::types::{PageIndex, VolumeId};

    #[test]
    fn layout_fits_and_aligns() {
        let l = Layout::for_device(64 << 20, 4096).expect("layout");
        assert!(l.end_bytes() <= 64 << 20);
        assert_eq!(l.record_offset_bytes, 4096);
        assert_eq!(l.data_offset_bytes % 4096, 0);
        assert!(l.slot_count * RECORD_BYTES <= l.record_area_bytes);
        // One more slot would not fit.
        assert!(Layout::with_slots(4096, l.slot_count + 1).end_bytes() > 64 << 20);
        assert!(Layout::for_device(8192, 4096).is_err());
    }

    #[test]
    fn superblock_round_trip_and_corruption() {
        let sb = Superblock {
            uuid: new_uuid(),
            layout: Layout::for_device(1 << 30, 4096).expect("layout"),
            clean: true,
            open_count: 7,
            volumes: vec![
                VolumeEntry::new("disk", 8 << 30, "/tmp/backing.img").expect("entry"),
                VolumeEntry::new("two", 4096, &"x".repeat(500)).expect("entry"),
            ],
        };
        let b = sb.encode().expect("encode");
        let back = Superblock::decode(&b).expect("decode");
        assert_eq!(back.volumes[0], sb.volumes[0]);
        assert!(back.volumes[1].identity.len() <= VOLUME_IDENTITY_BYTES_MAX);
        assert_eq!(back.layout, sb.layout);
        assert!(back.clean);
        for at in [0usize, 9, 40, 200, 4000, 4093] {
            let mut bad = b;
            bad[at] ^= 1;
            assert!(Superblock::decode(&bad).is_err(), "flip at {at} undetected");
        }
    }

    #[test]
    fn record_round_trip_and_corruption() {
        let record = SlotRecord {
            key: PageKey::new(VolumeId(3), PageIndex(12345)),
            seq: 99,
            dirty: true,
        };
        let mut b = [0u8; 32];
        encode_record(&mut b, 17, &record, 0xdead_beef);
        assert_eq!(
            decode_record(&b, 17),
            Ok(RecordState::Used {
                record,
                data_crc32c: 0xdead_beef
            })
        );
        assert_eq!(
            decode_record(&b, 18),
            Err(RecordError::Misplaced { found: 17, at: 18 })
        );
        for at in 0..32 {
            let mut bad = b;
            bad[at] ^= 0x10;
            assert!(decode_record(&bad, 17).is_err(), "flip at {at} undetected");
        }
        assert_eq!(decode_record(&[0u8; 32], 5), Ok(RecordState::Free));
    }
}
