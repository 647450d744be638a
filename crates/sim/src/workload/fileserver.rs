//! A file server at the block layer (PostMark, Filebench fileserver), for the write-policies experiments.
//!
//! Small files live in a fixed table of slots; streams (threads, one request
//! outstanding each) run PostMark transactions: a read or an append, then a
//! create or a delete. Data goes to the file's slot (appends continue at the
//! file's end, so they are sequential); each change also dirties inode,
//! bitmap and directory blocks, which are overwritten in place; a sync point
//! (an fsync) writes a journal commit at the journal head (sequential, `sync`)
//! and then the committed metadata blocks at their homes. The layout and
//! every parameter are in `docs/workloads.md`. It must stay O(1) per request
//! with no allocation after `new`, and never look at the cache.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::time::Nanos;

use super::gate::{Gate, Pacing};
use super::{IoRequest, ReqKind, Stop, Workload, WorkloadError, WorkloadStats, BLOCK_BYTES};

/// Most streams a configuration may ask for (completions find their stream by a scan).
pub const FILESERVER_STREAMS_MAX: u64 = 1024;
/// Most file slots (the table is allocated at start).
pub const FILESERVER_FILES_MAX: u64 = 1 << 24;
/// Most dirty metadata blocks per stream (allocated at start).
pub const FILESERVER_PENDING_MAX: u64 = 4096;
/// Metadata blocks one operation dirties at most (inode, bitmap, directory).
const OP_METADATA_BLOCKS_MAX: u64 = 3;
/// Inodes per 4 KiB inode-table block (256-byte inodes, as ext4).
const INODES_PER_BLOCK: u64 = 16;
/// Directory entries per 4 KiB directory block (about 32 bytes each).
const DIR_ENTRIES_PER_BLOCK: u64 = 128;
/// Bits of a 4 KiB allocation bitmap block, one per data block.
const BITMAP_BITS_PER_BLOCK: u64 = BLOCK_BYTES * 8;
/// Journal blocks a commit adds around its metadata: descriptor and commit record.
const COMMIT_OVERHEAD_BLOCKS: u64 = 2;

#[derive(Clone, Debug, PartialEq)]
pub struct FileServerConfig {
    /// Threads of the server; each has one request outstanding (closed loop,
    /// zero think time), and owns `files_max / streams` slots.
    pub streams: u64,
    /// Files present at the start (no I/O creates them: they are on the backing).
    pub files_initial: u64,
    /// Slots in the file table; a create needs a free one.
    pub files_max: u64,
    /// A created file's size is uniform in [min, max], in whole 4 KiB blocks.
    pub file_size_min_bytes: u64,
    /// Also the slot size: an append stops at it (as PostMark's appends do).
    pub file_size_max_bytes: u64,
    /// An append writes a uniform 1..=this many bytes, in whole 4 KiB blocks.
    pub append_bytes_max: u64,
    /// The first half of a transaction reads a whole file with this
    /// probability, else appends to one (PostMark's read bias, 0.5 = 5:5).
    pub read_bias: f64,
    /// The second half creates a file with this probability, else deletes
    /// one (PostMark's create bias).
    pub create_bias: f64,
    /// Probability that a create, delete or append ends with an fsync: a
    /// journal commit of the stream's dirty metadata blocks (a sync point).
    pub sync_fraction: f64,
    /// Dirty metadata blocks a stream may hold before a commit is forced
    /// (jbd2 commits a transaction that grows too large).
    pub pending_metadata_max: u64,
    /// Journal region at the start of the volume; commits go round it.
    pub journal_bytes: u64,
    pub stop: Stop,
}

impl FileServerConfig {
    /// PostMark as the write-policies paper ran it, scaled: `files` files
    /// of 48–152 KiB (about 100 KiB on average), 5:5 reads:appends and
    /// creates:deletes, 4 KiB reads and writes, `streams` threads.
    pub fn postmark_like(files: u64, streams: u64) -> FileServerConfig {
        FileServerConfig {
            streams,
            files_initial: files,
            files_max: files.saturating_mul(2),
            file_size_min_bytes: 48 * 1024,
            file_size_max_bytes: 152 * 1024,
            append_bytes_max: 16 * 1024,
            read_bias: 0.5,
            create_bias: 0.5,
            sync_fraction: 0.5,
            pending_metadata_max: 32,
            journal_bytes: 32 << 20,
            stop: Stop::default(),
        }
    }
}

/// Where each structure lies in the volume, in 4 KiB blocks: journal, inode
/// table, allocation bitmap, directory, then the file slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileServerLayout {
    pub journal_blocks: u64,
    pub inode_blocks: u64,
    pub bitmap_blocks: u64,
    pub dir_blocks: u64,
    pub slot_blocks: u64,
    pub slots: u64,
}

/// The part of the volume a byte offset falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileServerRegion {
    Journal,
    /// Inode table, bitmap and directory blocks.
    Metadata,
    /// File data: slot index.
    Data {
        slot: u64,
    },
    Outside,
}

impl FileServerLayout {
    fn new(journal_blocks: u64, slots: u64, slot_blocks: u64) -> FileServerLayout {
        FileServerLayout {
            journal_blocks,
            inode_blocks: slots.div_ceil(INODES_PER_BLOCK),
            bitmap_blocks: (slots * slot_blocks).div_ceil(BITMAP_BITS_PER_BLOCK),
            dir_blocks: slots.div_ceil(DIR_ENTRIES_PER_BLOCK),
            slot_blocks,
            slots,
        }
    }
    fn inode_start(&self) -> u64 {
        self.journal_blocks
    }
    fn bitmap_start(&self) -> u64 {
        self.inode_start() + self.inode_blocks
    }
    fn dir_start(&self) -> u64 {
        self.bitmap_start() + self.bitmap_blocks
    }
    /// First block of the file slots.
    pub fn data_start_block(&self) -> u64 {
        self.dir_start() + self.dir_blocks
    }
    pub fn total_bytes(&self) -> u64 {
        (self.data_start_block() + self.slots * self.slot_blocks) * BLOCK_BYTES
    }
    /// First byte of a slot.
    pub fn slot_offset_bytes(&self, slot: u64) -> u64 {
        (self.data_start_block() + slot * self.slot_blocks) * BLOCK_BYTES
    }
    pub fn region(&self, offset_bytes: u64) -> FileServerRegion {
        let block = offset_bytes / BLOCK_BYTES;
        if block < self.journal_blocks {
            FileServerRegion::Journal
        } else if block < self.data_start_block() {
            FileServerRegion::Metadata
        } else if offset_bytes < self.total_bytes() {
            FileServerRegion::Data {
                slot: (block - self.data_start_block()) / self.slot_blocks,
            }
        } else {
            FileServerRegion::Outside
        }
    }
    fn inode_block(&self, slot: u64) -> u64 {
        self.inode_start() + slot / INODES_PER_BLOCK
    }
    fn bitmap_block(&self, slot: u64) -> u64 {
        self.bitmap_start() + slot * self.slot_blocks / BITMAP_BITS_PER_BLOCK
    }
    fn dir_block(&self, slot: u64) -> u64 {
        self.dir_start() + slot / DIR_ENTRIES_PER_BLOCK
    }
}

/// Operations done so far (a transaction is one of the first two kinds and
/// one of the next two).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileServerCounts {
    pub reads: u64,
    pub appends: u64,
    /// Appends to a full file: they change only the inode (mtime).
    pub appends_full: u64,
    pub creates: u64,
    pub deletes: u64,
    /// Journal commits (sync points, asked for or forced by size).
    pub commits: u64,
}

/// What a stream does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Pick the next operation.
    Start,
    /// Read (a whole file) or write (create, append) blocks `next..end` of
    /// a slot, one request each, in order.
    Data {
        kind: ReqKind,
        slot: u64,
        next: u64,
        end: u64,
    },
    /// Write the journal commit of the pending metadata.
    Commit,
    /// Write pending metadata block `next` (and on) at its home.
    Checkpoint { next: usize },
}

#[derive(Clone, Debug)]
struct Stream {
    phase: Phase,
    in_flight: Option<u64>,
    /// The next operation is the second half of a transaction.
    second_half: bool,
    /// The operation under way ends with an fsync.
    sync_after: bool,
    /// Dirty metadata blocks not yet committed (distinct), capacity fixed at start.
    pending: Vec<u64>,
    /// This stream's slots are `order[first..first + per]`; the first
    /// `used` hold files.
    first: usize,
    used: usize,
}

pub struct FileServerWorkload {
    config: FileServerConfig,
    layout: FileServerLayout,
    rng: SmallRng,
    gate: Gate,
    streams: Vec<Stream>,
    /// Streams whose last request completed, in completion order.
    ready: VecDeque<usize>,
    /// Slot ids, grouped by owning stream (see `Stream::first`).
    order: Vec<u64>,
    /// Blocks in each slot's file (0: free).
    size_blocks: Vec<u64>,
    slots_per_stream: usize,
    journal_head: u64,
    counts: FileServerCounts,
    next_id: u64,
}

fn invalid(message: String) -> WorkloadError {
    WorkloadError::InvalidConfig(message)
}

fn blocks_of(name: &str, bytes: u64) -> Result<u64, WorkloadError> {
    if bytes == 0 || !bytes.is_multiple_of(BLOCK_BYTES) {
        return Err(invalid(format!(
            "fileserver {name} {bytes} must be a positive multiple of {BLOCK_BYTES}"
        )));
    }
    Ok(bytes / BLOCK_BYTES)
}

fn fraction(name: &str, value: f64) -> Result<f64, WorkloadError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(invalid(format!(
            "fileserver {name} {value} must be within [0, 1]"
        )));
    }
    Ok(value)
}

impl FileServerWorkload {
    pub fn new(config: FileServerConfig, seed: u64) -> Result<FileServerWorkload, WorkloadError> {
        if !(1..=FILESERVER_STREAMS_MAX).contains(&config.streams) {
            return Err(invalid(format!(
                "fileserver streams {} must be within 1..={FILESERVER_STREAMS_MAX}",
                config.streams
            )));
        }
        let size_min = blocks_of("file_size_min_bytes", config.file_size_min_bytes)?;
        let size_max = blocks_of("file_size_max_bytes", config.file_size_max_bytes)?;
        if size_min > size_max {
            return Err(invalid(format!(
                "fileserver file_size_min_bytes {} exceeds file_size_max_bytes {}",
                config.file_size_min_bytes, config.file_size_max_bytes
            )));
        }
        blocks_of("append_bytes_max", config.append_bytes_max)?;
        let journal_blocks = blocks_of("journal_bytes", config.journal_bytes)?;
        fraction("read_bias", config.read_bias)?;
        fraction("create_bias", config.create_bias)?;
        fraction("sync_fraction", config.sync_fraction)?;
        if !(OP_METADATA_BLOCKS_MAX..=FILESERVER_PENDING_MAX).contains(&config.pending_metadata_max)
        {
            return Err(invalid(format!(
                "fileserver pending_metadata_max {} must be within {OP_METADATA_BLOCKS_MAX} (one operation's blocks)..={FILESERVER_PENDING_MAX}",
                config.pending_metadata_max
            )));
        }
        if journal_blocks < config.pending_metadata_max + COMMIT_OVERHEAD_BLOCKS {
            return Err(invalid(format!(
                "fileserver journal_bytes {} cannot hold one commit of pending_metadata_max {} blocks plus {COMMIT_OVERHEAD_BLOCKS}",
                config.journal_bytes, config.pending_metadata_max
            )));
        }
        let per = config.files_max / config.streams;
        if per == 0 {
            return Err(invalid(format!(
                "fileserver files_max {} gives no slot to each of {} streams",
                config.files_max, config.streams
            )));
        }
        if config.files_initial > per * config.streams {
            return Err(invalid(format!(
                "fileserver files_initial {} exceeds the {} slots ({} per stream)",
                config.files_initial,
                per * config.streams,
                per
            )));
        }
        if config.files_max > FILESERVER_FILES_MAX {
            return Err(invalid(format!(
                "fileserver files_max {} exceeds {FILESERVER_FILES_MAX}",
                config.files_max
            )));
        }
        let slots = per * config.streams;
        // Every block count below fits in u64 bytes once this does.
        let bytes_max = slots
            .checked_mul(size_max)
            .and_then(|b| b.checked_mul(4))
            .and_then(|b| b.checked_add(journal_blocks))
            .and_then(|b| b.checked_mul(BLOCK_BYTES));
        if bytes_max.is_none() {
            return Err(invalid(format!(
                "fileserver volume of {slots} slots of {} B and a journal of {} B is too large",
                config.file_size_max_bytes, config.journal_bytes
            )));
        }
        let layout = FileServerLayout::new(journal_blocks, slots, size_max);
        let slots_usize = usize::try_from(slots)
            .map_err(|_| invalid(format!("fileserver files_max {slots} too large")))?;
        let pending_max = config.pending_metadata_max as usize; // at most FILESERVER_PENDING_MAX
        let per = per as usize;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut size_blocks = vec![0u64; slots_usize];
        let streams_n = config.streams as usize;
        let mut streams = Vec::with_capacity(streams_n);
        for k in 0..streams_n {
            let initial = config.files_initial / config.streams
                + u64::from((k as u64) < config.files_initial % config.streams);
            let used = initial as usize;
            for size in &mut size_blocks[k * per..k * per + used] {
                *size = rng.gen_range(size_min..=size_max);
            }
            streams.push(Stream {
                phase: Phase::Start,
                in_flight: None,
                second_half: false,
                sync_after: false,
                pending: Vec::with_capacity(pending_max),
                first: k * per,
                used,
            });
        }
        let mut ready = VecDeque::with_capacity(streams_n);
        ready.extend(0..streams_n);
        Ok(FileServerWorkload {
            gate: Gate::new(
                Pacing::Closed {
                    outstanding: config.streams,
                },
                config.stop,
            ),
            layout,
            rng,
            streams,
            ready,
            order: (0..slots).collect(),
            size_blocks,
            slots_per_stream: per,
            journal_head: 0,
            counts: FileServerCounts::default(),
            next_id: 0,
            config,
        })
    }

    pub fn layout(&self) -> FileServerLayout {
        self.layout
    }

    pub fn counts(&self) -> FileServerCounts {
        self.counts
    }

    fn size_min_blocks(&self) -> u64 {
        self.config.file_size_min_bytes / BLOCK_BYTES
    }

    /// Add a metadata block to the stream's transaction (once).
    fn dirty(&mut self, k: usize, block: u64) {
        let pending = &mut self.streams[k].pending;
        if !pending.contains(&block) {
            debug_assert!(pending.len() < pending.capacity());
            pending.push(block);
        }
    }

    /// Choose the stream's next operation and set its phase. An operation
    /// with no data request (delete, append to a full file) only dirties
    /// metadata and goes straight on to its sync point.
    fn start_operation(&mut self, k: usize) {
        let per = self.slots_per_stream;
        let s = &self.streams[k];
        let (first, used, second_half) = (s.first, s.used, s.second_half);
        self.streams[k].second_half = !second_half;
        if !second_half {
            if used == 0 {
                return self.create(k);
            }
            let slot = self.order[first + self.rng.gen_range(0..used)];
            if self.rng.gen::<f64>() < self.config.read_bias {
                self.counts.reads += 1;
                self.streams[k].phase = Phase::Data {
                    kind: ReqKind::Read,
                    slot,
                    next: 0,
                    end: self.size_blocks[slot as usize],
                };
            } else {
                self.append(k, slot);
            }
        } else {
            let create = if used == 0 {
                true
            } else if used == per {
                false
            } else {
                self.rng.gen::<f64>() < self.config.create_bias
            };
            if create {
                self.create(k);
            } else {
                self.delete(k);
            }
        }
    }

    fn create(&mut self, k: usize) {
        let per = self.slots_per_stream;
        let (first, used) = (self.streams[k].first, self.streams[k].used);
        debug_assert!(used < per);
        let pick = first + self.rng.gen_range(used..per);
        self.order.swap(first + used, pick);
        let slot = self.order[first + used];
        self.streams[k].used += 1;
        let size = self
            .rng
            .gen_range(self.size_min_blocks()..=self.layout.slot_blocks);
        self.size_blocks[slot as usize] = size;
        self.counts.creates += 1;
        self.streams[k].sync_after = self.rng.gen::<f64>() < self.config.sync_fraction;
        self.dirty(k, self.layout.inode_block(slot));
        self.dirty(k, self.layout.bitmap_block(slot));
        self.dirty(k, self.layout.dir_block(slot));
        self.streams[k].phase = Phase::Data {
            kind: ReqKind::Write,
            slot,
            next: 0,
            end: size,
        };
    }

    fn delete(&mut self, k: usize) {
        let (first, used) = (self.streams[k].first, self.streams[k].used);
        debug_assert!(used > 0);
        let pick = first + self.rng.gen_range(0..used);
        self.order.swap(pick, first + used - 1);
        let slot = self.order[first + used - 1];
        self.streams[k].used -= 1;
        self.size_blocks[slot as usize] = 0;
        self.counts.deletes += 1;
        self.streams[k].sync_after = self.rng.gen::<f64>() < self.config.sync_fraction;
        self.dirty(k, self.layout.inode_block(slot));
        self.dirty(k, self.layout.bitmap_block(slot));
        self.dirty(k, self.layout.dir_block(slot));
        self.after_change(k);
    }

    fn append(&mut self, k: usize, slot: u64) {
        let size = self.size_blocks[slot as usize];
        let room = self.layout.slot_blocks - size;
        let want = self
            .rng
            .gen_range(1..=self.config.append_bytes_max / BLOCK_BYTES);
        let n = want.min(room);
        self.counts.appends += 1;
        self.streams[k].sync_after = self.rng.gen::<f64>() < self.config.sync_fraction;
        self.dirty(k, self.layout.inode_block(slot));
        if n == 0 {
            self.counts.appends_full += 1;
            return self.after_change(k);
        }
        self.dirty(k, self.layout.bitmap_block(slot));
        self.size_blocks[slot as usize] = size + n;
        self.streams[k].phase = Phase::Data {
            kind: ReqKind::Write,
            slot,
            next: size,
            end: size + n,
        };
    }

    /// A change's data is written: commit now if it asked for an fsync or
    /// if the next change might not fit the transaction.
    fn after_change(&mut self, k: usize) {
        let s = &mut self.streams[k];
        let full =
            s.pending.len() as u64 + OP_METADATA_BLOCKS_MAX > self.config.pending_metadata_max;
        s.phase = if (s.sync_after || full) && !s.pending.is_empty() {
            Phase::Commit
        } else {
            Phase::Start
        };
        s.sync_after = false;
    }

    /// The stream's next request, moving through its phases.
    fn next_request(&mut self, k: usize) -> (ReqKind, u64, u64, bool) {
        loop {
            match self.streams[k].phase {
                Phase::Start => self.start_operation(k),
                Phase::Data {
                    kind,
                    slot,
                    next,
                    end,
                } => {
                    if next == end {
                        match kind {
                            ReqKind::Read => self.streams[k].phase = Phase::Start,
                            ReqKind::Write => self.after_change(k),
                        }
                        continue;
                    }
                    self.streams[k].phase = Phase::Data {
                        kind,
                        slot,
                        next: next + 1,
                        end,
                    };
                    let offset = self.layout.slot_offset_bytes(slot) + next * BLOCK_BYTES;
                    return (kind, offset, BLOCK_BYTES, false);
                }
                Phase::Commit => {
                    let blocks = self.streams[k].pending.len() as u64 + COMMIT_OVERHEAD_BLOCKS;
                    if self.journal_head + blocks > self.layout.journal_blocks {
                        self.journal_head = 0;
                    }
                    let offset = self.journal_head * BLOCK_BYTES;
                    self.journal_head += blocks;
                    self.counts.commits += 1;
                    self.streams[k].phase = Phase::Checkpoint { next: 0 };
                    return (ReqKind::Write, offset, blocks * BLOCK_BYTES, true);
                }
                Phase::Checkpoint { next } => {
                    let s = &mut self.streams[k];
                    let Some(&block) = s.pending.get(next) else {
                        s.pending.clear();
                        s.phase = Phase::Start;
                        continue;
                    };
                    s.phase = Phase::Checkpoint { next: next + 1 };
                    return (ReqKind::Write, block * BLOCK_BYTES, BLOCK_BYTES, false);
                }
            }
        }
    }
}

impl Workload for FileServerWorkload {
    fn next_arrival(&self) -> Option<Nanos> {
        self.gate.next_time(Some(Nanos::ZERO))
    }

    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        if !self.gate.ready(now, Some(Nanos::ZERO)) {
            return None;
        }
        let k = self.ready.pop_front()?;
        self.gate.on_issue(Some(Nanos::ZERO));
        let (kind, offset_bytes, len_bytes, sync) = self.next_request(k);
        let id = self.next_id;
        self.next_id += 1;
        self.streams[k].in_flight = Some(id);
        Some(IoRequest {
            id,
            volume: 0,
            kind,
            offset_bytes,
            len_bytes,
            sync,
            issuer: k as u32 + 1,
        })
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        let found = self.streams.iter().position(|s| s.in_flight == Some(id));
        debug_assert!(
            found.is_some(),
            "completion of request {id} that no stream has in flight"
        );
        let Some(k) = found else {
            return;
        };
        self.streams[k].in_flight = None;
        debug_assert!(self.ready.len() < self.ready.capacity());
        self.ready.push_back(k);
        self.gate.on_complete(now);
    }

    fn finished(&self) -> bool {
        self.gate.finished(Some(Nanos::ZERO))
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        vec![self.layout.total_bytes()]
    }

    fn name(&self) -> String {
        format!(
            "fileserver({} streams, {} files of {}-{} B, read bias {}, create bias {}, sync {})",
            self.config.streams,
            self.config.files_initial,
            self.config.file_size_min_bytes,
            self.config.file_size_max_bytes,
            self.config.read_bias,
            self.config.create_bias,
            self.config.sync_fraction
        )
    }

    fn stats(&self) -> WorkloadStats {
        self.gate.stats()
    }
}
