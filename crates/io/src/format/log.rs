//! Format 3's own structures, as pure encoding (no I/O): the layout, the
//! two log-start blocks and the batch header (`docs/format-v3.md`, where
//! the same bytes are described; the two change together). Every field
//! that does not decode is an error naming it, or, for a batch header
//! found while following the log, the reason the log ends there.

use super::{get_u16, get_u32, get_u64, put_u32, put_u64, FormatError, Layout, SUPERBLOCK_BYTES};
use wcache_core::types::{PageIndex, PageKey, VolumeId};

pub mod checkpoint;

/// The superblock version of a log-format cache.
pub const FORMAT_VERSION_LOG: u32 = 3;
pub const LOG_START_MAGIC: [u8; 8] = *b"WCACHEls";
pub const BATCH_MAGIC: [u8; 8] = *b"WCACHEbh";
/// Each of the two log-start blocks (A at 4096, B at 8192).
pub const LOG_START_BYTES: u64 = 4096;
pub use wcache_core::batch_header::{EXTENT_BYTES, FIXED_BYTES as HEADER_FIXED_BYTES, FREE_BYTES};
/// Where the header's crc32c lies (of the header slot with it zero, then the payload).
const HEADER_CRC_OFFSET_BYTES: usize = 56;
const EXTENT_FLAG_DIRTY: u8 = 1;
const EXTENT_FLAG_HOLE: u8 = 2;

/// The layout of a log-format cache of `slot_count` slots: the superblock,
/// the two log-start blocks and the two checkpoint copies (the record area
/// in the superblock's fields), then the ring of slots from the first
/// offset aligned to the page and 4 KiB.
pub fn layout_with_slots(page_size_bytes: u64, slot_count: u64) -> Layout {
    layout_with_slots_and(page_size_bytes, slot_count, true)
}

/// `layout_with_slots`, or (`checkpoint` false) the layout of a cache
/// formatted before checkpoints: no checkpoint copies.
pub fn layout_with_slots_and(page_size_bytes: u64, slot_count: u64, checkpoint: bool) -> Layout {
    let record_offset_bytes = SUPERBLOCK_BYTES;
    let copies = if checkpoint {
        2 * checkpoint::copy_bytes(slot_count)
    } else {
        0
    };
    let record_area_bytes = 2 * LOG_START_BYTES + copies;
    let align = page_size_bytes.max(4096);
    Layout {
        page_size_bytes,
        slot_count,
        record_offset_bytes,
        record_area_bytes,
        data_offset_bytes: (record_offset_bytes + record_area_bytes).next_multiple_of(align),
        log: true,
    }
}

/// Where checkpoint copy `copy` (0 or 1) lies, and its size; None on a
/// cache without checkpoint copies (formatted before them, or format 2).
pub fn checkpoint_copy(layout: &Layout, copy: u8) -> Option<(u64, u64)> {
    if !layout.log {
        return None;
    }
    let bytes = layout.record_area_bytes.saturating_sub(2 * LOG_START_BYTES) / 2;
    let first = layout.record_offset_bytes + 2 * LOG_START_BYTES;
    (bytes > 0).then_some((first + copy as u64 * bytes, bytes))
}

/// The most slots of `page_size_bytes` a log-format cache of `size_bytes` holds.
pub fn layout_for_device(size_bytes: u64, page_size_bytes: u64) -> Result<Layout, FormatError> {
    let fit = |page, slots: u64| layout_with_slots(page, slots.min(u32::MAX as u64 - 1));
    Layout::fit(size_bytes, page_size_bytes, fit)
}

/// Where recovery starts reading the log (one of the two blocks; the valid
/// one with the higher generation counts), and the checkpoint in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStart {
    pub generation: u64,
    /// The header slot of the oldest batch recovery reads.
    pub tail_slot: u32,
    /// That batch's sequence number.
    pub tail_seq: u64,
    /// The checkpoint in force, if any.
    pub checkpoint: Option<CheckpointRef>,
}

/// A checkpoint in force: the copy that holds it and the last batch its
/// replay covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointRef {
    /// 0 or 1.
    pub copy: u8,
    pub through_seq: u64,
}

impl LogStart {
    pub fn encode(&self, uuid: &[u8; 16]) -> [u8; LOG_START_BYTES as usize] {
        let mut b = [0u8; LOG_START_BYTES as usize];
        b[0..8].copy_from_slice(&LOG_START_MAGIC);
        b[8..24].copy_from_slice(uuid);
        put_u64(&mut b, 24, self.generation);
        put_u32(&mut b, 32, self.tail_slot);
        put_u64(&mut b, 40, self.tail_seq);
        if let Some(c) = self.checkpoint {
            put_u32(&mut b, 48, 1 + c.copy as u32);
            put_u64(&mut b, 56, c.through_seq);
        }
        let crc = crate::checksum::crc32c(&b[..LOG_START_BYTES as usize - 4]);
        put_u32(&mut b, LOG_START_BYTES as usize - 4, crc);
        b
    }

    /// The block's contents, or None if it is not a valid log-start block
    /// of this cache (never written, torn, another cache's) or names a slot
    /// beyond the ring or a checkpoint copy other than 1 or 2.
    pub fn decode(b: &[u8], uuid: &[u8; 16], slot_count: u64) -> Option<LogStart> {
        let end = LOG_START_BYTES as usize - 4;
        let zero = |r: std::ops::Range<usize>| b[r].iter().all(|&c| c == 0);
        let valid = b[0..8] == LOG_START_MAGIC
            && b[8..24] == uuid[..]
            && get_u32(b, end) == crate::checksum::crc32c(&b[..end])
            && zero(64..end)
            && zero(52..56)
            && zero(36..40);
        let copy = get_u32(b, 48);
        let checkpoint = (copy > 0).then(|| CheckpointRef {
            copy: (copy - 1) as u8,
            through_seq: get_u64(b, 56),
        });
        let start = LogStart {
            generation: get_u64(b, 24),
            tail_slot: get_u32(b, 32),
            tail_seq: get_u64(b, 40),
            checkpoint,
        };
        (valid && (start.tail_slot as u64) < slot_count && copy <= 2).then_some(start)
    }
}

/// Pages of one volume, consecutive in the page index, in version order
/// and in the batch's payload, all dirty or all clean; or (`hole`) payload
/// slots that hold no page (a page whose base could not be read: recovery
/// skips them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub volume: VolumeId,
    pub first_page: PageIndex,
    pub pages: u32,
    pub first_seq: u64,
    pub dirty: bool,
    pub hole: bool,
}

impl Extent {
    /// The page key and version of page `i` of the extent.
    pub fn page(&self, i: u32) -> (PageKey, u64) {
        let key = PageKey::new(self.volume, PageIndex(self.first_page.0 + i as u64));
        (key, self.first_seq + i as u64)
    }
}

/// A batch header's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub seq: u64,
    /// The run that wrote it: the superblock's open count then. Along the
    /// log it never falls: a batch of an earlier run after one of a later
    /// run is stale (kept by a power loss that tore the batch before it,
    /// then found where the later run's next header points), and ends the
    /// log. Zero in caches written before it was kept.
    pub epoch: u32,
    /// Slots after the header (its pages; holes where a page failed).
    pub payload_slots: u32,
    pub next_header: u32,
    pub extents: Vec<Extent>,
    /// Slots of earlier batches whose pages left the cache.
    pub frees: Vec<u32>,
}

/// Why a header found where the log goes on does not continue it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogEnd {
    #[error("no batch header (magic)")]
    NotAHeader,
    #[error("a batch of another cache, or of an earlier format of this one (uuid or salt)")]
    OtherCache,
    #[error("batch sequence number {found}, expected {expected}")]
    Sequence { found: u64, expected: u64 },
    #[error("batch header field {0} out of range")]
    BadField(&'static str),
    #[error("batch checksum mismatch (a torn or unwritten batch)")]
    Checksum,
    #[error("a stale batch of an earlier run (epoch {found} after {last})")]
    EarlierRun { found: u32, last: u32 },
}

impl BatchHeader {
    /// Bytes the header takes.
    pub fn bytes(&self) -> usize {
        HEADER_FIXED_BYTES + self.extents.len() * EXTENT_BYTES + self.frees.len() * FREE_BYTES
    }

    /// Writes the header into `out` (a whole zeroed header slot), crc
    /// field zero: `seal` fills it once the payload is known.
    pub fn encode(&self, uuid: &[u8; 16], salt: u64, out: &mut [u8]) {
        assert!(self.bytes() <= out.len(), "a batch header fits its slot");
        out[0..8].copy_from_slice(&BATCH_MAGIC);
        out[8..24].copy_from_slice(uuid);
        put_u64(out, 24, salt);
        put_u64(out, 32, self.seq);
        put_u32(out, 40, self.payload_slots);
        put_u32(out, 52, self.epoch);
        put_u32(out, 44, self.next_header);
        out[48..50].copy_from_slice(&(self.extents.len() as u16).to_le_bytes());
        out[50..52].copy_from_slice(&(self.frees.len() as u16).to_le_bytes());
        let mut at = HEADER_FIXED_BYTES;
        for e in &self.extents {
            out[at..at + 2].copy_from_slice(&e.volume.0.to_le_bytes());
            let hole = if e.hole { EXTENT_FLAG_HOLE } else { 0 };
            out[at + 2] = hole | if e.dirty { EXTENT_FLAG_DIRTY } else { 0 };
            put_u32(out, at + 4, e.pages);
            put_u64(out, at + 8, e.first_page.0);
            put_u64(out, at + 16, e.first_seq);
            at += EXTENT_BYTES;
        }
        for &f in &self.frees {
            put_u32(out, at, f);
            at += FREE_BYTES;
        }
    }

    /// The crc32c of the header slot (crc field zero) and the payload.
    pub fn checksum(header: &[u8], payload: &[&[u8]]) -> u32 {
        let mut crc = crate::checksum::Crc32c::new();
        crc.update(&header[..HEADER_CRC_OFFSET_BYTES]);
        crc.update(&[0u8; 4]);
        crc.update(&header[HEADER_CRC_OFFSET_BYTES + 4..]);
        for p in payload {
            crc.update(p);
        }
        crc.finish()
    }

    /// Stores the checksum of the header and `payload` in the header.
    pub fn seal(header: &mut [u8], payload: &[&[u8]]) {
        let crc = BatchHeader::checksum(header, payload);
        put_u32(header, HEADER_CRC_OFFSET_BYTES, crc);
    }

    /// Whether the stored checksum is that of the header and `payload`.
    pub fn checksum_ok(header: &[u8], payload: &[&[u8]]) -> bool {
        get_u32(header, HEADER_CRC_OFFSET_BYTES) == BatchHeader::checksum(header, payload)
    }

    /// The header in `b` (a whole header slot), if it is the batch `expected`
    /// of this cache (its checksum is checked apart, with the payload).
    pub fn decode(
        b: &[u8],
        (uuid, salt): (&[u8; 16], u64),
        expected: u64,
        slot_count: u64,
    ) -> Result<BatchHeader, LogEnd> {
        if b[0..8] != BATCH_MAGIC {
            return Err(LogEnd::NotAHeader);
        }
        if b[8..24] != uuid[..] || get_u64(b, 24) != salt {
            return Err(LogEnd::OtherCache);
        }
        let seq = get_u64(b, 32);
        if seq != expected {
            return Err(LogEnd::Sequence {
                found: seq,
                expected,
            });
        }
        let payload_slots = get_u32(b, 40);
        let next_header = get_u32(b, 44);
        let (n_ext, n_free) = (get_u16(b, 48) as usize, get_u16(b, 50) as usize);
        if payload_slots as u64 >= slot_count {
            return Err(LogEnd::BadField("payload_slots"));
        }
        if next_header as u64 >= slot_count {
            return Err(LogEnd::BadField("next_header"));
        }
        let bytes = HEADER_FIXED_BYTES + n_ext * EXTENT_BYTES + n_free * FREE_BYTES;
        if bytes > b.len() {
            return Err(LogEnd::BadField("extent_count"));
        }
        let mut at = HEADER_FIXED_BYTES;
        let mut extents = Vec::with_capacity(n_ext);
        let mut pages = 0u64;
        for _ in 0..n_ext {
            if b[at + 2] & !(EXTENT_FLAG_DIRTY | EXTENT_FLAG_HOLE) != 0 || b[at + 3] != 0 {
                return Err(LogEnd::BadField("extent flags"));
            }
            let e = Extent {
                volume: VolumeId(get_u16(b, at)),
                dirty: b[at + 2] & EXTENT_FLAG_DIRTY != 0,
                hole: b[at + 2] & EXTENT_FLAG_HOLE != 0,
                pages: get_u32(b, at + 4),
                first_page: PageIndex(get_u64(b, at + 8)),
                first_seq: get_u64(b, at + 16),
            };
            pages += e.pages as u64;
            extents.push(e);
            at += EXTENT_BYTES;
        }
        if pages > payload_slots as u64 {
            return Err(LogEnd::BadField("extent pages"));
        }
        let frees: Vec<u32> = (0..n_free)
            .map(|i| get_u32(b, at + i * FREE_BYTES))
            .collect();
        if frees.iter().any(|&f| f as u64 >= slot_count) {
            return Err(LogEnd::BadField("free slot"));
        }
        Ok(BatchHeader {
            seq,
            epoch: get_u32(b, 52),
            payload_slots,
            next_header,
            extents,
            frees,
        })
    }
}
