//! `CacheStore`: the on-device format (`format.rs`) on a real cache device —
//! format a new device, open and verify an existing one, scan every record
//! (with its data checksum) for recovery, and write records while serving.
//!
//! Records are kept in whole 4 KiB blocks in memory, each block under its
//! own lock, and written by whole sectors (512 bytes, or the device's
//! alignment: 4 KiB with O_DIRECT) so that direct I/O works. Writes of one
//! block are group-committed: a thread changes records in memory, then waits
//! for a write of the block that *started after* its change; one thread
//! writes a snapshot of every change made until then (one device write for
//! all the threads whose records share the block), the others wait for it.
//! Writes of one block never overlap, so the device sees its snapshots in
//! order and two record writes never clobber each other. Durability is the caller's:
//! record writes here are plain writes; the driver makes them durable with
//! its group-committed flush, as for page data. Administrative writes
//! (format, superblock, scrub) flush before returning.
//! This module must never decide what a page's current version is: recovery
//! hands every verified record to the engine, which decides.

mod log;
mod open;
pub use log::{keeps_older_versions, LogFound, LogWriter};
pub use open::{show_volumes, Asked, OpenError, OpenReport};

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use wcache_core::types::{PageKey, SlotIndex};
use wcache_core::{RecoveredSlot, SlotRecord};

use crate::device::{AlignedBuf, BlockDevice, DeviceError};
use crate::format::{
    decode_record, encode_record, new_uuid, EngineRecord, FormatError, Layout, RecordError,
    RecordState, Superblock, VolumeEntry, FORMAT_VERSION, RECORDS_PER_BLOCK, RECORD_BLOCK_BYTES,
    RECORD_BYTES, SUPERBLOCK_BYTES,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cache device {device}: {source}")]
    Format { device: String, source: FormatError },
    #[error("cache device: {0}")]
    Device(#[from] DeviceError),
    #[error("cache device {device} holds {size_bytes} bytes, but its superblock describes {need_bytes} (truncated or wrong device?)")]
    Truncated {
        device: String,
        size_bytes: u64,
        need_bytes: u64,
    },
    #[error("cache device {device}: neither log-start block is valid (format 3: both torn or corrupt); the log cannot be read")]
    NoLogStart { device: String },
}

/// A record that failed verification during a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadSlot {
    /// The 32 record bytes do not decode (corrupt metadata).
    Record { slot: u32, error: RecordError },
    /// The record is sound but the page data does not match its checksum:
    /// a write in flight at a power loss, or corrupt data.
    Data {
        slot: u32,
        key: PageKey,
        seq: u64,
        stored_crc32c: u32,
        computed_crc32c: u32,
    },
}

impl std::fmt::Display for BadSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadSlot::Record { slot, error } => write!(f, "slot {slot}: {error}"),
            BadSlot::Data {
                slot,
                key,
                seq,
                stored_crc32c,
                computed_crc32c,
            } => write!(
                f,
                "slot {slot} (volume {} page {} seq {seq}): data checksum {computed_crc32c:#010x} does not match the record's {stored_crc32c:#010x}",
                key.volume().0,
                key.page().0
            ),
        }
    }
}

/// Every record of the device, verified.
#[derive(Debug, Default)]
pub struct Scan {
    /// Records whose record and data checksums are good.
    pub found: Vec<RecoveredSlot>,
    pub bad: Vec<BadSlot>,
    pub free_slots: u64,
}

impl Scan {
    /// Per volume index: (dirty, clean) pages counting only the newest
    /// version of each page (what recovery keeps), and older versions.
    pub fn page_counts(&self) -> (std::collections::BTreeMap<u16, (u64, u64)>, u64) {
        let mut newest: std::collections::HashMap<u64, SlotRecord> = Default::default();
        let mut old = 0u64;
        for f in &self.found {
            let r = f.record;
            match newest.get(&r.key.0) {
                Some(n) if n.seq >= r.seq => old += 1,
                Some(_) => {
                    old += 1;
                    newest.insert(r.key.0, r);
                }
                None => {
                    newest.insert(r.key.0, r);
                }
            }
        }
        let mut per: std::collections::BTreeMap<u16, (u64, u64)> = Default::default();
        for r in newest.values() {
            let e = per.entry(r.key.volume().0).or_default();
            if r.dirty {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
        (per, old)
    }

    /// Pages recovery would destage (newest versions whose record is dirty).
    pub fn dirty_pages(&self) -> u64 {
        self.page_counts().0.values().map(|c| c.0).sum()
    }
}

pub struct CacheStore {
    dev: Arc<dyn BlockDevice>,
    layout: Layout,
    superblock: Mutex<Superblock>,
    /// In-memory copy of the record area, one aligned buffer per 4 KiB block.
    blocks: Vec<RecordBlock>,
    /// Unit of a record write: the sector (512 bytes) or the device's alignment.
    sector_bytes: usize,
    record_writes: AtomicU64,
    /// Blocks whose write was asked of the record writer threads.
    writers: WriterQueue,
    /// Told the block after a thread's own write of it ended
    /// (`set_write_ended_hook`): the io_uring data path starts the next
    /// write for the batches waiting on it.
    write_ended: std::sync::OnceLock<WriteEndedHook>,
    /// Bytes of zeros the format wrote where the device had no storage of
    /// its own (`BlockDevice::fill_holes`); 0 for a device opened.
    filled_bytes: u64,
}

/// See `CacheStore::set_write_ended_hook`.
pub type WriteEndedHook = Box<dyn Fn(u32) + Send + Sync>;

/// Where a staged change of a block stands, for a caller that must not
/// block (`CacheStore::commit_async`).
pub enum Commit {
    /// A write that started after the change succeeded.
    Done,
    /// The write that carried the change failed.
    Failed(DeviceError),
    /// The caller is now the block's writer: it writes `BlockWrite::bytes`
    /// at `BlockWrite::range` and then calls `end_async`.
    Started(BlockWrite),
    /// Another write of the block is running: ask again when it ended.
    Running,
}

/// A write of one record block taken by a caller that does not block.
pub struct BlockWrite {
    block: usize,
    taken: TakenWrite,
    snapshot: AlignedBuf,
}

impl BlockWrite {
    pub fn block(&self) -> u32 {
        self.block as u32
    }
    /// Device offset and the bytes to write there.
    pub fn bytes(&mut self) -> (u64, &[u8]) {
        let (offset, len) = self.taken.range.expect("a started write has bytes");
        (offset, &self.snapshot.get(len)[..])
    }
}

/// Blocks waiting for a record writer thread (`run_writer`), each once.
#[derive(Default)]
struct WriterQueue {
    state: Mutex<WriterState>,
    ready: Condvar,
}

#[derive(Default)]
struct WriterState {
    blocks: std::collections::VecDeque<usize>,
    stopping: bool,
}

/// A block changed in memory and the generation of the write that will
/// carry the change: the first write of the block to start after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    pub block: u32,
    pub target: u64,
}

/// Record block writes a thread took to send with its own (`take_writes`).
#[derive(Default)]
pub struct OwnWrites {
    snaps: Vec<AlignedBuf>,
    taken: Vec<(usize, TakenWrite)>,
}

/// A write of one record block taken by a thread (`take_write`).
struct TakenWrite {
    generation: u64,
    /// The changed bytes it carries (to be carried again if it fails).
    from: usize,
    to: usize,
    /// Device offset and length of the snapshot; `None`: nothing to write.
    range: Option<(u64, usize)>,
}

/// A record never crosses one of these (`docs/on-disk-format.md`, torn writes).
const SECTOR_BYTES: usize = 512;

/// One 4 KiB block of records in memory, and the group commit of its writes.
struct RecordBlock {
    state: Mutex<BlockState>,
    /// Signalled when a write finishes: index = its generation % 2.
    written: [Condvar; 2],
}

struct BlockState {
    bytes: AlignedBuf,
    /// Bytes changed since the last write started (`from >= to`: none).
    from: usize,
    to: usize,
    /// Writes started, finished, and the last that succeeded (generations).
    started: u64,
    finished: u64,
    last_ok: u64,
    running: bool,
    /// Threads waiting on `written[generation % 2]` for that generation
    /// (a wake-up is a system call: only then).
    waiters: [u32; 2],
    /// In the record writers' queue (`request_writes`), not yet taken.
    queued: bool,
    last_error: String,
}

impl BlockState {
    fn changed(&mut self, from: usize, to: usize) {
        self.from = self.from.min(from);
        self.to = self.to.max(to);
    }
}

thread_local! {
    /// The snapshot a thread writes for a block (4 KiB; no allocation per write).
    static SNAPSHOT: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::new());
}

impl CacheStore {
    /// True when the device's first 4 KiB are all zeros (a new device).
    pub fn is_blank(dev: &dyn BlockDevice) -> Result<bool, DeviceError> {
        let mut buf = AlignedBuf::new();
        let b = buf.get(SUPERBLOCK_BYTES as usize);
        dev.read_at(b, 0)?;
        Ok(b.iter().all(|&c| c == 0))
    }

    /// Reads and verifies the superblock only.
    pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock, StoreError> {
        let mut buf = AlignedBuf::new();
        let b = buf.get(SUPERBLOCK_BYTES as usize);
        dev.read_at(b, 0)?;
        let sb = Superblock::decode(b).map_err(|source| StoreError::Format {
            device: dev.name(),
            source,
        })?;
        let need_bytes = sb.layout.end_bytes();
        if dev.len_bytes() < need_bytes {
            return Err(StoreError::Truncated {
                device: dev.name(),
                size_bytes: dev.len_bytes(),
                need_bytes,
            });
        }
        Ok(sb)
    }

    /// Opens a formatted device: verifies the superblock and loads the record area.
    pub fn open(dev: Arc<dyn BlockDevice>) -> Result<CacheStore, StoreError> {
        let sb = CacheStore::read_superblock(dev.as_ref())?;
        let mut buf = AlignedBuf::new();
        let area = buf.get(sb.layout.record_area_bytes as usize);
        dev.read_at(area, sb.layout.record_offset_bytes)?;
        Ok(CacheStore::with_blocks(dev, sb, Some(area)))
    }

    fn with_blocks(dev: Arc<dyn BlockDevice>, sb: Superblock, area: Option<&[u8]>) -> CacheStore {
        let layout = sb.layout;
        let blocks = (0..layout.record_blocks() as usize)
            .map(|i| {
                let mut b = AlignedBuf::new();
                let block = b.get(RECORD_BLOCK_BYTES as usize);
                match area {
                    Some(a) => {
                        let at = i * RECORD_BLOCK_BYTES as usize;
                        block.copy_from_slice(&a[at..at + RECORD_BLOCK_BYTES as usize]);
                    }
                    None => block.fill(0),
                }
                RecordBlock {
                    state: Mutex::new(BlockState {
                        bytes: b,
                        from: usize::MAX,
                        to: 0,
                        started: 0,
                        finished: 0,
                        last_ok: 0,
                        running: false,
                        waiters: [0; 2],
                        queued: false,
                        last_error: String::new(),
                    }),
                    written: [Condvar::new(), Condvar::new()],
                }
            })
            .collect();
        // Records are written by whole sectors (512 bytes, or the device's
        // alignment: 4 KiB with O_DIRECT).
        let sector_bytes = dev
            .alignment_bytes()
            .clamp(SECTOR_BYTES, RECORD_BLOCK_BYTES as usize);
        CacheStore {
            dev,
            layout,
            sector_bytes,
            superblock: Mutex::new(sb),
            blocks,
            record_writes: AtomicU64::new(0),
            writers: WriterQueue::default(),
            write_ended: std::sync::OnceLock::new(),
            filled_bytes: 0,
        }
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn superblock(&self) -> Superblock {
        self.lock_sb().clone()
    }

    /// Record blocks written so far (counter for stats).
    pub fn record_writes(&self) -> u64 {
        self.record_writes.load(Ordering::Relaxed)
    }

    fn lock_sb(&self) -> MutexGuard<'_, Superblock> {
        self.superblock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_block(&self, block: usize) -> MutexGuard<'_, BlockState> {
        self.blocks[block]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once a write of `block` that started after the caller's
    /// change (made under `st`, recorded with `changed`) has succeeded, or
    /// with the error of that write. The thread that finds no write running
    /// writes the sectors of every change so far, from a snapshot taken under
    /// the lock; writes of one block never overlap.
    fn commit_block<'a>(
        &'a self,
        block: usize,
        st: MutexGuard<'a, BlockState>,
    ) -> Result<(), DeviceError> {
        let target = st.started + 1;
        self.commit_to(block, st, target)
    }

    /// As `commit_block`, for a change made earlier whose carrying write
    /// is generation `target` (`Staged::target`).
    fn commit_to<'a>(
        &'a self,
        block: usize,
        mut st: MutexGuard<'a, BlockState>,
        target: u64,
    ) -> Result<(), DeviceError> {
        let rb = &self.blocks[block];
        loop {
            if st.last_ok >= target {
                return Ok(());
            }
            if st.finished >= target {
                return Err(self.block_error(block, &st));
            }
            if !st.running {
                let taken = SNAPSHOT.with(|snap| {
                    let mut snap = snap.borrow_mut();
                    let taken = self.take_write(block, &mut st, &mut snap);
                    drop(st);
                    let result = match &taken.range {
                        Some((offset, len)) => self.dev.write_at(&snap.get(*len)[..], *offset),
                        None => Ok(()),
                    };
                    (taken, result)
                });
                st = self.lock_block(block);
                let generation = taken.0.generation;
                self.end_write(block, &mut st, taken.0, taken.1);
                self.wake_after(block, &st, generation);
                drop(st);
                self.write_ended(block);
                st = self.lock_block(block);
                continue;
            }
            // Wait for generation `target` (the one running, or the next).
            let parity = (target % 2) as usize;
            st.waiters[parity] += 1;
            st = rb.written[parity]
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
            st.waiters[parity] -= 1;
        }
    }

    /// Makes the caller the writer of `block` (which no thread is writing:
    /// `st.running` is false): the next generation, with the sectors of
    /// every change so far copied into `snap`. `range`: where those bytes
    /// go on the device, `None` when nothing changed.
    fn take_write(&self, block: usize, st: &mut BlockState, snap: &mut AlignedBuf) -> TakenWrite {
        debug_assert!(!st.running, "a block has one writer at a time");
        st.running = true;
        st.started += 1;
        let (from, to) = (st.from, st.to);
        st.from = usize::MAX;
        st.to = 0;
        let range = (from < to).then(|| {
            let sector = self.sector_bytes;
            let start = from / sector * sector;
            let end = to.next_multiple_of(sector).min(RECORD_BLOCK_BYTES as usize);
            let copy = snap.get(end - start);
            copy.copy_from_slice(&st.bytes.get(RECORD_BLOCK_BYTES as usize)[start..end]);
            self.record_writes.fetch_add(1, Ordering::Relaxed);
            let offset = self.layout.record_offset_bytes + block as u64 * RECORD_BLOCK_BYTES;
            (offset + start as u64, end - start)
        });
        TakenWrite {
            generation: st.started,
            from,
            to,
            range,
        }
    }

    /// Ends a write taken with `take_write`: records its outcome (a failed
    /// write leaves its changes to the next one) and wakes its waiters.
    fn end_write(
        &self,
        block: usize,
        st: &mut BlockState,
        taken: TakenWrite,
        result: Result<(), DeviceError>,
    ) {
        st.running = false;
        st.finished = taken.generation;
        match result {
            Ok(()) => st.last_ok = taken.generation,
            Err(e) => {
                st.last_error = e.to_string();
                st.changed(taken.from, taken.to);
            }
        }
        self.wake_after(block, st, taken.generation);
    }

    /// After write `generation` of `block` finished: wakes every thread
    /// waiting for it, and one of those waiting for the next generation
    /// when changes wait to be written (it writes them). Waiters for the
    /// next generation sleep on the other condition variable, so a write
    /// wakes only the threads it concerns.
    fn wake_after(&self, block: usize, st: &BlockState, generation: u64) {
        let rb = &self.blocks[block];
        let done = (generation % 2) as usize;
        if st.waiters[done] > 0 {
            rb.written[done].notify_all();
        }
        let next = 1 - done;
        if st.from < st.to && st.waiters[next] > 0 {
            rb.written[next].notify_one();
        }
    }

    /// The error of the last write of `block`, which failed.
    fn block_error(&self, block: usize, st: &BlockState) -> DeviceError {
        DeviceError::Io {
            device: self.dev.name(),
            op: "record write",
            offset_bytes: self.layout.record_offset_bytes + block as u64 * RECORD_BLOCK_BYTES,
            len_bytes: RECORD_BLOCK_BYTES,
            source: std::io::Error::other(st.last_error.clone()),
        }
    }

    /// Sets the function told each block whose write a thread of this
    /// store ended (`commit_to`, `end_writes`, merged runs); writes ended
    /// with `end_async` are not told. Once per store.
    pub fn set_write_ended_hook(&self, hook: WriteEndedHook) {
        let _ = self.write_ended.set(hook);
    }

    fn write_ended(&self, block: usize) {
        if let Some(hook) = self.write_ended.get() {
            hook(block as u32);
        }
    }

    /// `commit_to` for a caller that must not block: where the change
    /// staged as `Staged { block, target }` stands; when no write of the
    /// block is running, the caller becomes its writer (`Started`, with the
    /// snapshot in `snapshot`, which it gets back in `end_async`).
    pub fn commit_async(&self, staged: Staged, snapshot: &mut Option<AlignedBuf>) -> Commit {
        let block = staged.block as usize;
        let mut st = self.lock_block(block);
        loop {
            if st.last_ok >= staged.target {
                return Commit::Done;
            }
            if st.finished >= staged.target {
                return Commit::Failed(self.block_error(block, &st));
            }
            if st.running {
                return Commit::Running;
            }
            let mut snap = snapshot.take().unwrap_or_default();
            let taken = self.take_write(block, &mut st, &mut snap);
            if taken.range.is_some() {
                return Commit::Started(BlockWrite {
                    block,
                    taken,
                    snapshot: snap,
                });
            }
            // Nothing left to write: this write carries no bytes and ends now.
            *snapshot = Some(snap);
            self.end_write(block, &mut st, taken, Ok(()));
        }
    }

    /// Ends a write `commit_async` started; gives its snapshot buffer back.
    pub fn end_async(&self, write: BlockWrite, result: Result<(), DeviceError>) -> AlignedBuf {
        let BlockWrite {
            block,
            taken,
            snapshot,
        } = write;
        let mut st = self.lock_block(block);
        self.end_write(block, &mut st, taken, result);
        snapshot
    }

    /// The record block holding `slot`'s record (`Staged::block`).
    pub fn block_of_slot(slot: SlotIndex) -> u32 {
        CacheStore::block_of(slot.0).0 as u32
    }

    fn block_of(slot: u32) -> (usize, usize) {
        let block = (slot as u64 / RECORDS_PER_BLOCK) as usize;
        let at = (slot as u64 % RECORDS_PER_BLOCK * RECORD_BYTES) as usize;
        (block, at)
    }

    /// Writes slot `slot`'s record (not yet durable: the caller flushes).
    pub fn write_record(
        &self,
        slot: SlotIndex,
        record: &SlotRecord,
        data_crc32c: u32,
    ) -> Result<(), DeviceError> {
        assert!(
            (slot.0 as u64) < self.layout.slot_count,
            "slot beyond the cache"
        );
        let (block, at) = CacheStore::block_of(slot.0);
        let mut st = self.lock_block(block);
        let bytes = st.bytes.get(RECORD_BLOCK_BYTES as usize);
        encode_record(
            &mut bytes[at..at + RECORD_BYTES as usize],
            slot.0,
            record,
            data_crc32c,
        );
        st.changed(at, at + RECORD_BYTES as usize);
        self.commit_block(block, st)
    }

    /// Writes the records of a batch of page writes, `(slot, record, data
    /// crc32c)`, with one device write per record block touched (the sectors
    /// from its first to its last changed record), in slot order. Not yet
    /// durable: the caller flushes. A block whose write fails reports each of
    /// its records' indices in `items` through `failed`.
    pub fn write_records(
        &self,
        items: &[(SlotIndex, SlotRecord, u32)],
        order: &mut Vec<u32>,
        failed: &mut dyn FnMut(usize, &DeviceError),
    ) {
        let mut staged = Vec::new();
        self.stage_records(items, order, &mut staged);
        self.await_writes(&staged, &mut |k, e| {
            let block = staged[k].block;
            for &i in order.iter() {
                if CacheStore::block_of(items[i as usize].0 .0).0 == block as usize {
                    failed(i as usize, e);
                }
            }
        });
    }

    /// Changes the records of a batch of page writes in memory, `(slot,
    /// record, data crc32c)`, and appends the blocks touched (in slot
    /// order, each once) to `staged`; nothing is written yet
    /// (`request_writes`, `await_writes`).
    pub fn stage_records(
        &self,
        items: &[(SlotIndex, SlotRecord, u32)],
        order: &mut Vec<u32>,
        staged: &mut Vec<Staged>,
    ) {
        order.clear();
        order.extend(0..items.len() as u32);
        order.sort_unstable_by_key(|&i| items[i as usize].0 .0);
        let mut i = 0;
        while i < order.len() {
            let (block, _) = CacheStore::block_of(items[order[i] as usize].0 .0);
            let mut st = self.lock_block(block);
            let bytes = st.bytes.get(RECORD_BLOCK_BYTES as usize);
            let (mut from, mut to) = (usize::MAX, 0);
            while i < order.len() {
                let (slot, record, crc) = &items[order[i] as usize];
                let (b, at) = CacheStore::block_of(slot.0);
                if b != block {
                    break;
                }
                assert!(
                    (slot.0 as u64) < self.layout.slot_count,
                    "slot beyond the cache"
                );
                encode_record(
                    &mut bytes[at..at + RECORD_BYTES as usize],
                    slot.0,
                    record,
                    *crc,
                );
                from = from.min(at);
                to = to.max(at + RECORD_BYTES as usize);
                i += 1;
            }
            st.changed(from, to);
            staged.push(Staged {
                block: block as u32,
                target: st.started + 1,
            });
        }
    }

    /// Zeroes the records of `slots` (free) in memory and appends the
    /// blocks touched to `staged`, as `stage_records`.
    pub fn stage_frees(
        &self,
        slots: &[SlotIndex],
        sorted: &mut Vec<u32>,
        staged: &mut Vec<Staged>,
    ) {
        sorted.clear();
        sorted.extend(slots.iter().map(|s| s.0));
        sorted.sort_unstable();
        let mut i = 0;
        while i < sorted.len() {
            let (block, _) = CacheStore::block_of(sorted[i]);
            let mut st = self.lock_block(block);
            let bytes = st.bytes.get(RECORD_BLOCK_BYTES as usize);
            let (mut from, mut to) = (usize::MAX, 0);
            while i < sorted.len() && CacheStore::block_of(sorted[i]).0 == block {
                assert!(
                    (sorted[i] as u64) < self.layout.slot_count,
                    "slot beyond the cache"
                );
                let (_, at) = CacheStore::block_of(sorted[i]);
                bytes[at..at + RECORD_BYTES as usize].fill(0);
                from = from.min(at);
                to = to.max(at + RECORD_BYTES as usize);
                i += 1;
            }
            st.changed(from, to);
            staged.push(Staged {
                block: block as u32,
                target: st.started + 1,
            });
        }
    }

    /// Takes the writes of the staged blocks that no thread is writing
    /// now (at most `max` blocks), their snapshots in `own`, so that the
    /// caller sends them with its own writes (`BlockDevice::write_many`)
    /// and then calls `end_writes`. Blocks being written are left to
    /// `request_writes`/`await_writes`.
    pub fn take_writes(&self, staged: &[Staged], max: usize, own: &mut OwnWrites) {
        own.taken.clear();
        for s in staged {
            let block = s.block as usize;
            if own.taken.len() >= max || own.taken.iter().any(|(b, _)| *b == block) {
                continue;
            }
            let mut st = self.lock_block(block);
            if st.running || st.from >= st.to {
                continue;
            }
            let k = own.taken.len();
            if own.snaps.len() <= k {
                own.snaps.push(AlignedBuf::new());
            }
            let taken = self.take_write(block, &mut st, &mut own.snaps[k]);
            own.taken.push((block, taken));
        }
    }

    /// The writes `take_writes` took: bytes and device offset, in order.
    pub fn own_writes<'a>(&self, own: &'a mut OwnWrites, out: &mut Vec<(&'a [u8], u64)>) {
        let OwnWrites { snaps, taken } = own;
        for (snap, (_, t)) in snaps.iter_mut().zip(taken.iter()) {
            if let Some((offset, len)) = t.range {
                out.push((&snap.get(len)[..], offset));
            }
        }
    }

    /// Ends the writes `take_writes` took; `failed(k)` is the error of
    /// the `k`-th of `own_writes`, if it failed.
    pub fn end_writes(
        &self,
        own: &mut OwnWrites,
        failed: &mut dyn FnMut(usize) -> Option<DeviceError>,
    ) {
        let mut k = 0;
        for (block, taken) in own.taken.drain(..) {
            let result = match taken.range {
                Some(_) => {
                    k += 1;
                    failed(k - 1).map_or(Ok(()), Err)
                }
                None => Ok(()),
            };
            let mut st = self.lock_block(block);
            self.end_write(block, &mut st, taken, result);
            drop(st);
            self.write_ended(block);
        }
    }

    /// Asks the record writer threads (`run_writer`) to write these blocks
    /// now, so that they are written while the caller writes page data.
    /// A block already queued is not queued again.
    pub fn request_writes(&self, staged: &[Staged]) {
        self.request_writes_except(staged, &OwnWrites::default());
    }

    /// As `request_writes`, leaving out the blocks the caller took (`own`).
    pub fn request_writes_except(&self, staged: &[Staged], own: &OwnWrites) {
        let mut added = 0;
        let mut q = self.writers.state.lock().unwrap_or_else(|p| p.into_inner());
        for s in staged {
            if own.taken.iter().any(|(b, _)| *b == s.block as usize) {
                continue;
            }
            let mut st = self.lock_block(s.block as usize);
            if !st.queued && st.last_ok < s.target && !q.stopping {
                st.queued = true;
                q.blocks.push_back(s.block as usize);
                added += 1;
            }
        }
        drop(q);
        match added {
            0 => {}
            1 => self.writers.ready.notify_one(),
            _ => self.writers.ready.notify_all(),
        }
    }

    /// Returns once every staged change is on the device (a write of its
    /// block that started after it succeeded), writing the blocks no
    /// thread is writing yet itself. A block whose write failed is reported
    /// by its index in `staged` through `failed`. Not yet durable unless the
    /// device's writes are: the caller flushes.
    pub fn await_writes(&self, staged: &[Staged], failed: &mut dyn FnMut(usize, &DeviceError)) {
        for (k, s) in staged.iter().enumerate() {
            let st = self.lock_block(s.block as usize);
            if let Err(e) = self.commit_to(s.block as usize, st, s.target) {
                failed(k, &e);
            }
        }
    }

    /// Writes the blocks of `staged` in runs of consecutive blocks, one
    /// device write per run of at most `run_blocks_max` blocks (the blocks
    /// between two staged ones within `gap_blocks_max` are written too, as
    /// they are in memory), then returns as `await_writes`. For many
    /// scattered changes at once (a batch of record frees): a few large
    /// writes instead of one small write per block. Each block of a run
    /// takes part in its group commit as a write of its own would.
    pub fn write_merged(
        &self,
        staged: &[Staged],
        gap_blocks_max: u32,
        run_blocks_max: u32,
        failed: &mut dyn FnMut(usize, &DeviceError),
    ) {
        let mut blocks: Vec<u32> = staged.iter().map(|s| s.block).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let mut buf = AlignedBuf::new();
        let mut generations = Vec::with_capacity(run_blocks_max as usize);
        let mut k = 0;
        while k < blocks.len() {
            let first = blocks[k];
            let mut last = first;
            k += 1;
            while k < blocks.len()
                && blocks[k] - last <= gap_blocks_max + 1
                && blocks[k] - first < run_blocks_max
            {
                last = blocks[k];
                k += 1;
            }
            self.write_run(first, last, &mut buf, &mut generations);
        }
        self.await_writes(staged, failed);
    }

    /// Writes record blocks `first..=last` from memory, each block taken
    /// as its writer, in as few device writes as possible: a block being
    /// written already, or queued for a record writer thread (a block that
    /// page writes use now), is left out and splits the run; `await_writes`
    /// then commits it as usual.
    fn write_run(&self, first: u32, last: u32, buf: &mut AlignedBuf, generations: &mut Vec<u64>) {
        let block_bytes = RECORD_BLOCK_BYTES as usize;
        let run = buf.get((last - first + 1) as usize * block_bytes);
        generations.clear();
        let mut run_first = first;
        for block in first..=last {
            let mut st = self.lock_block(block as usize);
            if st.running || st.queued {
                drop(st);
                let at = (run_first - first) as usize * block_bytes;
                self.finish_run(run_first, &run[at..], generations);
                run_first = block + 1;
                continue;
            }
            st.running = true;
            st.started += 1;
            generations.push(st.started);
            st.from = usize::MAX;
            st.to = 0;
            let n = (block - first) as usize;
            run[n * block_bytes..(n + 1) * block_bytes].copy_from_slice(st.bytes.get(block_bytes));
        }
        let at = (run_first - first) as usize * block_bytes;
        self.finish_run(run_first, &run[at..], generations);
    }

    /// Writes the `generations.len()` blocks taken from `run_first` on, whose
    /// bytes start `run`, ends their writes and wakes their waiters.
    fn finish_run(&self, run_first: u32, run: &[u8], generations: &mut Vec<u64>) {
        if generations.is_empty() {
            return;
        }
        let block_bytes = RECORD_BLOCK_BYTES as usize;
        let count = generations.len();
        let offset = self.layout.record_offset_bytes + run_first as u64 * RECORD_BLOCK_BYTES;
        self.record_writes.fetch_add(1, Ordering::Relaxed);
        let result = self.dev.write_at(&run[..count * block_bytes], offset);
        for (n, &generation) in generations.iter().enumerate() {
            let block = run_first as usize + n;
            let mut st = self.lock_block(block);
            st.running = false;
            st.finished = generation;
            match &result {
                Ok(()) => st.last_ok = generation,
                Err(e) => {
                    st.last_error = e.to_string();
                    st.changed(0, block_bytes);
                }
            }
            self.wake_after(block, &st, generation);
            drop(st);
            self.write_ended(block);
        }
        generations.clear();
    }

    /// A record writer thread: writes the blocks `request_writes` queued,
    /// until `stop_writers`. A failed write is reported to the threads
    /// waiting for it (`await_writes`), not here.
    pub fn run_writer(&self) {
        loop {
            let block = {
                let mut q = self.writers.state.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if q.stopping {
                        return;
                    }
                    if let Some(b) = q.blocks.pop_front() {
                        break b;
                    }
                    q = self
                        .writers
                        .ready
                        .wait(q)
                        .unwrap_or_else(|p| p.into_inner());
                }
            };
            // Keep writing the block while changes arrive (`queued` stays
            // set meanwhile: no other writer thread is woken for it).
            loop {
                let mut st = self.lock_block(block);
                if st.from >= st.to {
                    st.queued = false;
                    break;
                }
                let _ = self.commit_block(block, st);
            }
        }
    }

    /// Ends every `run_writer` loop (queued blocks are left to the threads
    /// awaiting them, which write them themselves).
    pub fn stop_writers(&self) {
        let mut q = self.writers.state.lock().unwrap_or_else(|p| p.into_inner());
        q.stopping = true;
        q.blocks.clear();
        drop(q);
        self.writers.ready.notify_all();
    }

    /// Zeroes the records of `slots` (free), one write per block touched
    /// (not yet durable: the caller flushes).
    pub fn free_records(&self, slots: &[SlotIndex]) -> Result<(), DeviceError> {
        let (mut sorted, mut staged) = (Vec::new(), Vec::new());
        self.stage_frees(slots, &mut sorted, &mut staged);
        let mut first = Ok(());
        self.await_writes(&staged, &mut |_, e| {
            if first.is_ok() {
                first = Err(clone_device_error(e));
            }
        });
        first
    }

    /// Frees the records of `slots` durably (scrub after recovery, offline tools).
    pub fn free_records_durably(&self, slots: &[SlotIndex]) -> Result<(), DeviceError> {
        self.free_records(slots)?;
        sync(self.dev.as_ref())
    }

    /// Frees every record durably (after a complete drain: the backings hold everything).
    pub fn free_all_records(&self) -> Result<(), DeviceError> {
        for block in 0..self.blocks.len() {
            let mut st = self.lock_block(block);
            let bytes = st.bytes.get(RECORD_BLOCK_BYTES as usize);
            if bytes.iter().any(|&c| c != 0) {
                bytes.fill(0);
                st.changed(0, RECORD_BLOCK_BYTES as usize);
                self.commit_block(block, st)?;
            }
        }
        sync(self.dev.as_ref())
    }

    /// Verifies every record, and (with `verify_data`) each used slot's data
    /// against its checksum. Reads the device's data area; records come from
    /// the in-memory copy loaded by `open`.
    pub fn scan(&self, verify_data: bool) -> Result<Scan, DeviceError> {
        let mut scan = Scan::default();
        let page = self.layout.page_size_bytes as usize;
        let mut buf = AlignedBuf::new();
        for block in 0..self.blocks.len() {
            let mut st = self.lock_block(block);
            let bytes = st.bytes.get(RECORD_BLOCK_BYTES as usize);
            for i in 0..RECORDS_PER_BLOCK {
                let slot = block as u64 * RECORDS_PER_BLOCK + i;
                if slot >= self.layout.slot_count {
                    break;
                }
                let slot = slot as u32;
                let at = (i * RECORD_BYTES) as usize;
                match decode_record(&bytes[at..at + RECORD_BYTES as usize], slot) {
                    Ok(RecordState::Free) => scan.free_slots += 1,
                    Ok(RecordState::Used {
                        record,
                        data_crc32c,
                    }) => {
                        if verify_data {
                            let data = buf.get(page);
                            self.dev
                                .read_at(data, self.layout.slot_offset_bytes(slot))?;
                            let computed = crate::checksum::crc32c(data);
                            if computed != data_crc32c {
                                scan.bad.push(BadSlot::Data {
                                    slot,
                                    key: record.key,
                                    seq: record.seq,
                                    stored_crc32c: data_crc32c,
                                    computed_crc32c: computed,
                                });
                                continue;
                            }
                        }
                        scan.found.push(RecoveredSlot {
                            slot: SlotIndex(slot),
                            record,
                        });
                    }
                    Err(error) => scan.bad.push(BadSlot::Record { slot, error }),
                }
            }
        }
        Ok(scan)
    }

    /// Writes the superblock with `clean` (and, when opening for service, a
    /// bumped open count) and makes it durable.
    pub fn set_clean(&self, clean: bool, opening: bool) -> Result<(), StoreError> {
        let mut sb = self.lock_sb();
        sb.clean = clean;
        if opening {
            sb.open_count += 1;
        }
        self.write_superblock(&sb)
    }

    /// Records that the device is opened: not clean, one more open, and with
    /// `engine` (a server's open) the configuration in force, which
    /// upgrades a version-1 superblock to the current version. `None` (the
    /// offline drain) keeps the version and the record as they are. Durable
    /// on return.
    pub fn record_open(&self, engine: Option<&EngineRecord>) -> Result<(), StoreError> {
        let mut sb = self.lock_sb();
        sb.clean = false;
        sb.open_count += 1;
        if let Some(engine) = engine {
            sb.format_version = sb.format_version.max(FORMAT_VERSION);
            sb.engine = Some(engine.clone());
        }
        self.write_superblock(&sb)
    }

    /// Replaces the volume table (same geometry), durably.
    pub fn set_volumes(&self, volumes: Vec<VolumeEntry>) -> Result<(), StoreError> {
        let mut sb = self.lock_sb();
        sb.volumes = volumes;
        self.write_superblock(&sb)
    }

    fn write_superblock(&self, sb: &Superblock) -> Result<(), StoreError> {
        let encoded = sb.encode().map_err(|source| StoreError::Format {
            device: self.dev.name(),
            source,
        })?;
        let mut buf = AlignedBuf::new();
        let b = buf.get(SUPERBLOCK_BYTES as usize);
        b.copy_from_slice(&encoded);
        self.dev.write_at(b, 0)?;
        sync(self.dev.as_ref())?;
        Ok(())
    }
}

fn sync(dev: &dyn BlockDevice) -> Result<(), DeviceError> {
    if dev.writes_durable() {
        Ok(())
    } else {
        dev.flush()
    }
}

/// A copy of a device error for a second caller (`io::Error` is not
/// `Clone`): same device, operation, range and OS error number.
fn clone_device_error(e: &DeviceError) -> DeviceError {
    match e {
        DeviceError::Io {
            device,
            op,
            offset_bytes,
            len_bytes,
            source,
        } => DeviceError::Io {
            device: device.clone(),
            op,
            offset_bytes: *offset_bytes,
            len_bytes: *len_bytes,
            source: match source.raw_os_error() {
                Some(errno) => std::io::Error::from_raw_os_error(errno),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
        },
        other => DeviceError::Io {
            device: String::new(),
            op: "record write",
            offset_bytes: 0,
            len_bytes: 0,
            source: std::io::Error::other(other.to_string()),
        },
    }
}
