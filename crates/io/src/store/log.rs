//! Format 3 on a real cache device: the log read back at recovery (from
//! the durable tail, batch by batch, until one does not check out), and
//! the writes of serving (a batch with one write, the tail's move).

use super::*;
use crate::format::log::{BatchHeader, LogStart, LOG_START_BYTES};
use wcache_core::LogPosition;

/// What recovery found in the log (the versions apart).
#[derive(Clone, Debug)]
pub struct LogFound {
    pub position: LogPosition,
    /// The log-start block in force (the next move writes the other).
    pub start: LogStart,
    pub batches: u64,
    /// Why the log ends where it does (the batch after the last one read).
    pub end: String,
    /// The batch after the last one read was begun (its header is this
    /// cache's next) but not whole: a write in flight at a crash, or,
    /// after a clean shutdown, damage.
    pub torn: bool,
}

impl CacheStore {
    /// Reads the log from the durable tail: each batch whose header is the
    /// next of this cache and whose checksum (header and pages) holds; the
    /// first that fails ends it (a torn batch is discarded whole). Replayed
    /// in order: a newer version of a page replaces the older, a free drops
    /// the version its slot held.
    pub fn read_log(&self) -> Result<(Vec<RecoveredSlot>, LogFound), StoreError> {
        let layout = self.layout;
        let sb = self.superblock();
        let start = self.read_log_start(&sb)?;
        let (ring, p) = (layout.slot_count, layout.page_size_bytes as usize);
        let mut found: Vec<Option<RecoveredSlot>> = Vec::new();
        let (mut at_slot, mut at_key): (Index, Index64) = Default::default();
        let mut page_seq_max = 0u64;
        let (mut at, mut expected, mut used, mut batches) = (start.tail_slot, start.tail_seq, 0, 0);
        let mut header_buf = AlignedBuf::new();
        let mut payload_buf = AlignedBuf::new();
        let mut batch_slots = Vec::new();
        let mut torn = false;
        let end = loop {
            if used == ring {
                break "the log fills the ring".to_string();
            }
            let header = header_buf.get(p);
            self.dev.read_at(header, layout.slot_offset_bytes(at))?;
            let h = match BatchHeader::decode(header, (&sb.uuid, sb.salt), expected, ring) {
                Ok(h) => h,
                Err(e) => break e.to_string(),
            };
            let n = h.payload_slots as u64;
            let next = (at as u64 + 1 + n) % ring;
            if used + 1 + n > ring || h.next_header as u64 != next {
                torn = true;
                break "batch header field next_header out of range".to_string();
            }
            let payload = payload_buf.get(n as usize * p);
            self.read_slots((at as u64 + 1) % ring, payload)?;
            if !BatchHeader::checksum_ok(header, &[payload]) {
                torn = true;
                break "batch checksum mismatch (a torn or unwritten batch)".to_string();
            }
            replay_batch(&mut found, (&mut at_slot, &mut at_key), &h, (at, ring));
            batch_slots.push(1 + n as u32);
            let last = h.extents.iter().map(|e| e.first_seq + e.pages as u64);
            page_seq_max = page_seq_max.max(last.max().unwrap_or(0));
            (at, expected, used, batches) =
                (h.next_header, expected + 1, used + 1 + n, batches + 1);
        };
        let position = LogPosition {
            tail: SlotIndex(start.tail_slot),
            log_slots: used as u32,
            batches: batch_slots,
            next_seq: expected,
            next_page_seq: page_seq_max + 1,
        };
        let found = found.into_iter().flatten().collect();
        Ok((
            found,
            LogFound {
                position,
                start,
                batches,
                end,
                torn,
            },
        ))
    }

    /// The valid log-start block with the higher generation.
    fn read_log_start(&self, sb: &Superblock) -> Result<LogStart, StoreError> {
        let mut buf = AlignedBuf::new();
        let b = buf.get(2 * LOG_START_BYTES as usize);
        self.dev.read_at(b, self.layout.record_offset_bytes)?;
        let n = LOG_START_BYTES as usize;
        let slots = self.layout.slot_count;
        let (a, z) = (
            LogStart::decode(&b[..n], &sb.uuid, slots),
            LogStart::decode(&b[n..], &sb.uuid, slots),
        );
        match (a, z) {
            (Some(a), Some(z)) => Ok(if a.generation >= z.generation { a } else { z }),
            (Some(s), None) | (None, Some(s)) => Ok(s),
            (None, None) => Err(StoreError::NoLogStart {
                device: self.dev.name(),
            }),
        }
    }

    /// Reads `out.len()` bytes of slots from `first`, going on at slot 0
    /// where the ring ends.
    fn read_slots(&self, first: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        if out.is_empty() {
            return Ok(());
        }
        let p = self.layout.page_size_bytes;
        let before_end = ((self.layout.slot_count - first) * p).min(out.len() as u64) as usize;
        let (head, rest) = out.split_at_mut(before_end);
        self.dev
            .read_at(head, self.layout.slot_offset_bytes(first as u32))?;
        if !rest.is_empty() {
            self.dev.read_at(rest, self.layout.slot_offset_bytes(0))?;
        }
        Ok(())
    }
}

/// The versions found so far, by slot and by page.
type Index = std::collections::HashMap<u32, usize>;
type Index64 = std::collections::HashMap<u64, usize>;

/// A batch read back, as the log replays: its frees drop the versions
/// their slots held, then its extents' pages are found (holes
/// skipped), each in place of its page's version found before (so an
/// older version never comes back, even once the newer one is freed).
fn replay_batch(
    found: &mut Vec<Option<RecoveredSlot>>,
    (at_slot, at_key): (&mut Index, &mut Index64),
    h: &BatchHeader,
    (header, ring): (u32, u64),
) {
    for f in &h.frees {
        if let Some(i) = at_slot.remove(f) {
            if let Some(v) = found[i].take() {
                at_key.remove(&v.record.key.0);
            }
        }
    }
    let mut k = 0u64;
    for e in &h.extents {
        if e.hole {
            k += e.pages as u64;
            continue;
        }
        for i in 0..e.pages {
            let slot = SlotIndex(((header as u64 + 1 + k) % ring) as u32);
            let (key, seq) = e.page(i);
            let record = SlotRecord {
                key,
                seq,
                dirty: e.dirty,
            };
            if let Some(older) = at_key.insert(key.0, found.len()) {
                if let Some(v) = found[older].take() {
                    at_slot.remove(&v.slot.0);
                }
            }
            at_slot.insert(slot.0, found.len());
            found.push(Some(RecoveredSlot { slot, record }));
            k += 1;
        }
    }
}

/// The log's writes while serving: batches, and moves of the tail.
pub struct LogWriter {
    store: Arc<CacheStore>,
    uuid: [u8; 16],
    salt: u64,
    /// The log-start block last written (the next move writes the other).
    start: Mutex<LogStart>,
}

impl LogWriter {
    pub fn new(store: Arc<CacheStore>, start: LogStart) -> LogWriter {
        let sb = store.superblock();
        LogWriter {
            store,
            uuid: sb.uuid,
            salt: sb.salt,
            start: Mutex::new(start),
        }
    }

    pub fn store(&self) -> &Arc<CacheStore> {
        &self.store
    }

    /// Slots of a batch's payload on this cache (`batch_header::payload_slots`).
    pub fn payload_slots(&self, header: SlotIndex, next_header: SlotIndex) -> usize {
        let ring = self.store.layout.slot_count;
        wcache_core::batch_header::payload_slots(header.0, next_header.0, ring)
    }

    /// Writes a batch: `head` (one page) sealed as `header`, then `pages`
    /// (each a whole number of pages), from slot `header_slot`, in one
    /// vectored write (two where the batch passes the ring's end).
    /// `direct`: around the page cache where the device can
    /// (`BlockDevice::write_direct_vectored_at`), for large batches. Not
    /// durable yet: the caller's barrier makes it so.
    pub fn write_batch(
        &self,
        header_slot: u32,
        header: &BatchHeader,
        head: &mut [u8],
        pages: &[&[u8]],
        direct: bool,
    ) -> Result<(), DeviceError> {
        let layout = self.store.layout;
        let p = layout.page_size_bytes as usize;
        self.seal(head, header, pages);
        // Split where the batch passes the ring's end (at a page boundary
        // within one of `pages`, which may be longer than a page).
        let mut room = (layout.slot_count - header_slot as u64 - 1) as usize * p;
        let mut first: Vec<&[u8]> = Vec::with_capacity(1 + pages.len());
        let mut rest: Vec<&[u8]> = Vec::new();
        first.push(head);
        for &page in pages {
            let here = page.len().min(room);
            room -= here;
            first.push(&page[..here]);
            rest.push(&page[here..]);
        }
        first.retain(|b| !b.is_empty());
        rest.retain(|b| !b.is_empty());
        let dev = &self.store.dev;
        for (part, slot) in [(first, header_slot), (rest, 0)] {
            let at = layout.slot_offset_bytes(slot);
            if part.is_empty() || (direct && dev.write_direct_vectored_at(&part, at)?) {
                continue;
            }
            dev.write_vectored_at(&part, at)?;
        }
        Ok(())
    }

    /// `head` (one page) becomes `header`, sealed with `payload`'s checksum.
    fn seal(&self, head: &mut [u8], header: &BatchHeader, payload: &[&[u8]]) {
        head.fill(0);
        header.encode(&self.uuid, self.salt, head);
        BatchHeader::seal(head, payload);
    }

    /// Makes every earlier write durable, then records durably that
    /// recovery starts at the batch at `tail` (`tail_seq`), in the
    /// log-start block not in force.
    pub fn advance(&self, tail: u32, tail_seq: u64) -> Result<(), DeviceError> {
        let store = &self.store;
        sync(store.dev.as_ref())?;
        let mut start = self.start.lock().unwrap_or_else(|p| p.into_inner());
        let next = LogStart {
            generation: start.generation + 1,
            tail_slot: tail,
            tail_seq,
        };
        let mut buf = AlignedBuf::new();
        let b = buf.get(LOG_START_BYTES as usize);
        b.copy_from_slice(&next.encode(&self.uuid));
        let which = next.generation % 2; // A holds odd generations, B even
        let at = store.layout.record_offset_bytes + (1 - which) * LOG_START_BYTES;
        store.dev.write_at(b, at)?;
        sync(store.dev.as_ref())?;
        *start = next;
        Ok(())
    }
}
