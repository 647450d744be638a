//! Format 3 on a real cache device: the log read back at recovery (from
//! the durable tail, batch by batch, until one does not check out), and
//! the writes of serving (a batch with one write, the tail's move).

use super::*;
use crate::format::log::checkpoint;
use crate::format::log::{
    checkpoint_copy, BatchHeader, CheckpointRef, LogEnd, LogStart, LOG_START_BYTES,
};
use rustc_hash::FxHashMap;
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
    /// Where the replay started: the checkpoint in force, or why not.
    pub checkpoint: String,
    /// The time taken to read the checkpoint, and the batches after it.
    pub times: (std::time::Duration, std::time::Duration),
    /// Slots of the batches read after the checkpoint (or from the tail).
    pub slots_read: u64,
    /// The epoch of the last batch found (`BatchHeader::epoch`).
    pub last_epoch: u32,
}

impl CacheStore {
    /// Reads the log: from the checkpoint in force where it still covers
    /// the durable tail (`read_checkpoint`), else from the tail; then each
    /// batch whose header is the next of this cache and whose checksum
    /// (header and pages) holds; the first that fails ends it (a torn batch
    /// is discarded whole). Replayed in order: a newer version of a page
    /// replaces the older, a free drops the version its slot held.
    pub fn read_log(&self) -> Result<(Vec<RecoveredSlot>, LogFound), StoreError> {
        self.read_log_from(true)
    }

    /// `read_log` from the durable tail, every batch read and checked,
    /// whatever checkpoint is in force (`wcache check`).
    pub fn read_log_whole(&self) -> Result<(Vec<RecoveredSlot>, LogFound), StoreError> {
        self.read_log_from(false)
    }

    fn read_log_from(
        &self,
        use_checkpoint: bool,
    ) -> Result<(Vec<RecoveredSlot>, LogFound), StoreError> {
        let layout = self.layout;
        let sb = self.superblock();
        let start = self.read_log_start(&sb)?;
        let (ring, p) = (layout.slot_count, layout.page_size_bytes as usize);
        let t0 = std::time::Instant::now();
        let (mut r, checkpoint) = self.replay_start(&sb, &start, use_checkpoint);
        let t1 = std::time::Instant::now();
        let used_before = r.used;
        let mut header_buf = AlignedBuf::new();
        let mut payload_buf = AlignedBuf::new();
        let (mut batches, mut torn) = (0, false);
        let end = loop {
            if r.used == ring {
                break "the log fills the ring".to_string();
            }
            let header = header_buf.get(p);
            self.dev.read_at(header, layout.slot_offset_bytes(r.at))?;
            let h = match BatchHeader::decode(header, (&sb.uuid, sb.salt), r.expected, ring) {
                Ok(h) => h,
                Err(e) => break e.to_string(),
            };
            if h.epoch < r.epoch {
                let end = LogEnd::EarlierRun {
                    found: h.epoch,
                    last: r.epoch,
                };
                break end.to_string();
            }
            let n = h.payload_slots as u64;
            let next = (r.at as u64 + 1 + n) % ring;
            if r.used + 1 + n > ring || h.next_header as u64 != next {
                torn = true;
                break "batch header field next_header out of range".to_string();
            }
            let payload = payload_buf.get(n as usize * p);
            self.read_slots((r.at as u64 + 1) % ring, payload)?;
            if !BatchHeader::checksum_ok(header, &[payload]) {
                torn = true;
                break "batch checksum mismatch (a torn or unwritten batch)".to_string();
            }
            r.batch(&h, ring);
            batches += 1;
        };
        let slots_read = r.used - used_before;
        let position = LogPosition {
            tail: SlotIndex(start.tail_slot),
            log_slots: r.used as u32,
            batches: r.batch_slots,
            next_seq: r.expected,
            next_page_seq: r.page_seq_max + 1,
        };
        let found = r.found.into_iter().flatten().collect();
        let found_log = LogFound {
            position,
            start,
            batches,
            end,
            torn,
            checkpoint,
            times: (t1 - t0, t1.elapsed()),
            slots_read,
            last_epoch: r.epoch,
        };
        Ok((found, found_log))
    }

    /// Where the replay starts: the checkpoint in force where it is used,
    /// else the tail; and a note of which, and why.
    fn replay_start(&self, sb: &Superblock, start: &LogStart, use_it: bool) -> (Replay, String) {
        let keep_older = keeps_older_versions(sb);
        let from_tail = |why: String| (Replay::new(start, self.layout.slot_count, keep_older), why);
        let c = match (use_it, start.checkpoint) {
            (false, _) => return from_tail("not read".into()),
            (true, None) => return from_tail("none in force".into()),
            (true, Some(c)) => c,
        };
        match self.read_checkpoint(sb, start, c) {
            Ok(r) => {
                let note = format!(
                    "through batch {}: {} versions, {} batches the tail has passed since dropped",
                    c.through_seq,
                    r.found.len(),
                    r.skipped
                );
                (r, note)
            }
            Err(why) => from_tail(format!("not used: {why}")),
        }
    }

    /// The replay as the checkpoint in force `c` left it, with the versions
    /// in batches the tail has passed since dropped; an error (why it is
    /// not used) if it no longer covers the tail or does not check out.
    fn read_checkpoint(
        &self,
        sb: &Superblock,
        start: &LogStart,
        c: CheckpointRef,
    ) -> Result<Replay, String> {
        let ring = self.layout.slot_count;
        let Some((offset, bytes)) = checkpoint_copy(&self.layout, c.copy) else {
            return Err("this cache has no checkpoint area".into());
        };
        if start.tail_seq > c.through_seq {
            return Err(format!("the tail has passed batch {}", c.through_seq));
        }
        let cache = (&sb.uuid, sb.salt);
        let mut buf = AlignedBuf::new();
        let head = buf.get(checkpoint::HEADER_BYTES);
        self.dev.read_at(head, offset).map_err(|e| e.to_string())?;
        let (nb, ne) = checkpoint::decode_counts(head, cache, ring).map_err(|e| e.to_string())?;
        let len = checkpoint::encoded_bytes(nb, ne);
        if len as u64 > bytes {
            return Err("checkpoint field entry_count out of range".into());
        }
        let all = buf.get(len);
        self.dev.read_at(all, offset).map_err(|e| e.to_string())?;
        let (cp, last_epoch, entries) =
            checkpoint::decode(all, cache, ring).map_err(|e| e.to_string())?;
        if cp.next_seq != c.through_seq + 1 {
            return Err(format!(
                "the copy covers batches before {}, the log-start block says through {}",
                cp.next_seq, c.through_seq
            ));
        }
        let mut r = Replay::from_checkpoint(start, cp, entries, ring, keeps_older_versions(sb))
            .ok_or_else(|| "the tail is not at one of its batches".to_string())?;
        r.epoch = last_epoch;
        Ok(r)
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

/// Whether the log's writer kept older versions of a page (ordered
/// write-back, as the superblock's configuration in force says): its
/// replay keeps them too.
pub fn keeps_older_versions(sb: &Superblock) -> bool {
    sb.engine
        .as_ref()
        .is_some_and(|e| e.write_policy == wcache_core::WritePolicyKind::OrderedWriteBack)
}

/// A replay of the log in progress: the versions found (by slot and by
/// page), where the next batch is, and the batches read.
struct Replay {
    found: Vec<Option<RecoveredSlot>>,
    /// Per slot of the ring, the index in `found` of the version it holds
    /// (`NONE`: none).
    at_slot: Vec<u32>,
    at_key: FxHashMap<u64, u32>,
    page_seq_max: u64,
    /// The next batch's header slot and sequence number.
    at: u32,
    expected: u64,
    /// The epoch of the last batch read (a later one may not be lower).
    epoch: u32,
    /// Slots of the log so far, and of each batch.
    used: u64,
    batch_slots: Vec<u32>,
    /// Batches of the checkpoint the tail has passed since it was taken.
    skipped: usize,
    /// A page's older versions stay found beside the newer until freed:
    /// the log of ordered write-back, which destages every version in order.
    keep_older: bool,
}

impl Replay {
    const NONE: u32 = u32::MAX;

    fn new(start: &LogStart, ring: u64, keep_older: bool) -> Replay {
        Replay {
            keep_older,
            found: Vec::new(),
            at_slot: vec![Replay::NONE; ring as usize],
            at_key: FxHashMap::default(),
            page_seq_max: 0,
            at: start.tail_slot,
            expected: start.tail_seq,
            epoch: 0,
            used: 0,
            batch_slots: Vec::new(),
            skipped: 0,
        }
    }

    /// The replay a checkpoint saved, from the durable tail on: None if
    /// the tail is not at one of its batches (before its last one's end).
    fn from_checkpoint(
        start: &LogStart,
        cp: LogPosition,
        entries: Vec<RecoveredSlot>,
        ring: u64,
        keep_older: bool,
    ) -> Option<Replay> {
        let first_seq = cp.next_seq.checked_sub(cp.batches.len() as u64)?;
        let skipped = start.tail_seq.checked_sub(first_seq)? as usize;
        let passed: u64 = cp.batches.get(..skipped)?.iter().map(|&n| n as u64).sum();
        if skipped == cp.batches.len()
            || (cp.tail.0 as u64 + passed) % ring != start.tail_slot as u64
        {
            return None;
        }
        let mut r = Replay::new(start, ring, keep_older);
        r.found.reserve(entries.len());
        r.at_key.reserve(entries.len());
        for e in entries {
            // Entries are in log order: those in passed batches come first.
            let from_tail = (e.slot.0 as u64 + ring - cp.tail.0 as u64) % ring;
            if from_tail >= passed {
                r.version(e.slot, e.record);
            }
        }
        r.batch_slots = cp.batches[skipped..].to_vec();
        r.used = cp.log_slots as u64 - passed;
        r.at = ((cp.tail.0 as u64 + cp.log_slots as u64) % ring) as u32;
        r.expected = cp.next_seq;
        r.page_seq_max = cp.next_page_seq.saturating_sub(1);
        r.skipped = skipped;
        Some(r)
    }

    /// A version found, in place of its page's version found before (so an
    /// older version never comes back, even once the newer one is freed).
    fn version(&mut self, slot: SlotIndex, record: SlotRecord) {
        let i = self.found.len() as u32;
        if let Some(older) = self.at_key.insert(record.key.0, i) {
            if !self.keep_older {
                if let Some(v) = self.found[older as usize].take() {
                    self.at_slot[v.slot.0 as usize] = Replay::NONE;
                }
            }
        }
        self.at_slot[slot.0 as usize] = i;
        self.found.push(Some(RecoveredSlot { slot, record }));
        self.page_seq_max = self.page_seq_max.max(record.seq);
    }

    /// A batch read back (header at `self.at`): its frees drop the versions
    /// their slots held, then its extents' pages are found (holes
    /// skipped); the replay moves past it.
    fn batch(&mut self, h: &BatchHeader, ring: u64) {
        for &f in &h.frees {
            let i = std::mem::replace(&mut self.at_slot[f as usize], Replay::NONE);
            if let Some(v) = self.found.get_mut(i as usize).and_then(Option::take) {
                if self.at_key.get(&v.record.key.0) == Some(&i) {
                    self.at_key.remove(&v.record.key.0);
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
                let slot = SlotIndex(((self.at as u64 + 1 + k) % ring) as u32);
                let (key, seq) = e.page(i);
                let record = SlotRecord {
                    key,
                    seq,
                    dirty: e.dirty,
                };
                self.version(slot, record);
                k += 1;
            }
        }
        let n = 1 + h.payload_slots;
        self.batch_slots.push(n);
        self.epoch = h.epoch;
        (self.at, self.expected, self.used) =
            (h.next_header, self.expected + 1, self.used + n as u64);
    }
}

/// The log's writes while serving: batches, and moves of the tail.
pub struct LogWriter {
    store: Arc<CacheStore>,
    uuid: [u8; 16],
    salt: u64,
    /// The log-start block last written (the next move writes the other).
    start: Mutex<LogStart>,
    /// This run's epoch (the superblock's open count, bumped by this open
    /// before any batch is written), carried by every batch it writes.
    epoch: u32,
    /// The first batch of this run, and the epoch of the batch before it
    /// (the last one recovery found), for a checkpoint through it.
    run_first_seq: u64,
    found_epoch: u32,
}

impl LogWriter {
    /// The writer of a run that goes on from the log recovery `found`.
    pub fn new(store: Arc<CacheStore>, found: &LogFound) -> LogWriter {
        let sb = store.superblock();
        LogWriter {
            store,
            uuid: sb.uuid,
            salt: sb.salt,
            start: Mutex::new(found.start),
            epoch: u32::try_from(sb.open_count).unwrap_or(u32::MAX),
            run_first_seq: found.position.next_seq,
            found_epoch: found.last_epoch,
        }
    }

    /// The epoch of the batches this run writes (`BatchHeader::epoch`).
    pub fn epoch(&self) -> u32 {
        self.epoch
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
            checkpoint: start.checkpoint,
        };
        self.write_start(&next)?;
        *start = next;
        Ok(())
    }

    /// Writes `next` in the log-start block its generation says (A holds
    /// odd generations, B even) and makes it durable.
    fn write_start(&self, next: &LogStart) -> Result<(), DeviceError> {
        let store = &self.store;
        let mut buf = AlignedBuf::new();
        let b = buf.get(LOG_START_BYTES as usize);
        b.copy_from_slice(&next.encode(&self.uuid));
        let which = next.generation % 2;
        let at = store.layout.record_offset_bytes + (1 - which) * LOG_START_BYTES;
        store.dev.write_at(b, at)?;
        sync(store.dev.as_ref())
    }

    /// `LogCheckpoint`: the checkpoint written in the copy not in force,
    /// made durable with every earlier write (the batches it covers), then
    /// named in the next log-start block beside the tail in force. A cache
    /// formatted without checkpoint copies takes none.
    pub fn checkpoint(
        &self,
        position: &LogPosition,
        entries: &[wcache_core::RecoveredSlot],
    ) -> Result<(), DeviceError> {
        let store = &self.store;
        let in_force = self
            .start
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .checkpoint;
        let copy = in_force.map_or(0, |c| 1 - c.copy);
        let Some((offset, bytes)) = checkpoint_copy(&store.layout, copy) else {
            return Ok(());
        };
        let len = checkpoint::encoded_bytes(position.batches.len(), entries.len());
        assert!(len as u64 <= bytes, "a checkpoint fits its copy");
        let mut buf = AlignedBuf::new();
        let b = buf.get(len);
        b.fill(0);
        let through = position.next_seq - 1;
        let last_epoch = if through >= self.run_first_seq {
            self.epoch
        } else {
            self.found_epoch
        };
        checkpoint::encode((&self.uuid, self.salt), position, last_epoch, entries, b);
        store.dev.write_at(b, offset)?;
        sync(store.dev.as_ref())?;
        let mut start = self.start.lock().unwrap_or_else(|p| p.into_inner());
        let next = LogStart {
            generation: start.generation + 1,
            checkpoint: Some(CheckpointRef {
                copy,
                through_seq: through,
            }),
            ..*start
        };
        self.write_start(&next)?;
        *start = next;
        Ok(())
    }
}
