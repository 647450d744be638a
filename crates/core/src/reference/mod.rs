//! The reference interpreter of [`IoCommand`]: what each command does to the
//! cache device (slot pages and their records), the backing volumes and the
//! request buffers, written once and as plainly as the command table in
//! `docs/engine.md`. The simulator, its data checker and the engine's model
//! test all execute commands through it, so a new command kind is one edit
//! here plus the real driver (`crates/io/src/driver.rs`).
//!
//! Data is held in *units* of `unit_bytes` (a byte in the engine model, a
//! 64-bit stamp per 512-byte sector in the simulator). Slots and backing
//! pages are created on first write.
//!
//! Durability: a command's effect is applied when it completes, which by the
//! contract means it is durable. What a crash leaves of commands still in
//! flight is applied by [`Reference::apply_partial`], and a cache device that
//! lies about durability is modelled by [`Reference::set_volatile_writes`] and
//! [`Reference::lose_volatile`]. [`Reference::recoverable`] selects what
//! recovery hands to `Engine::recover`, as the real store's scan does
//! (`crates/io/src/store.rs`: a record counts only if its slot's data matches
//! the record's data checksum; the others are zeroed).
//!
//! This is a model for tests and the simulator: it allocates per command and
//! must never be used on the hot path of the real driver.

use crate::command::{IoCommand, PageBase, SlotRecord, Source};
use crate::engine::{LogPosition, RecoveredSlot};
use crate::types::{RequestId, SlotIndex, VolumeId};
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

mod accesses;
mod log;
pub use accesses::accesses;
use log::LoggedBatch;

/// One unit of modelled data, with the values that mark where it came from.
pub trait Unit: Copy + Eq + std::fmt::Debug + Into<u64> {
    /// Zeros (`Source::Zero`, and a backing never written).
    const ZERO: Self;
    /// A slot never written.
    const UNWRITTEN_SLOT: Self;
    /// The start of a page whose patch covers it whole (`PageBase::None`).
    const NO_BASE: Self;
}

impl Unit for u8 {
    const ZERO: u8 = 0;
    const UNWRITTEN_SLOT: u8 = 0xEE;
    const NO_BASE: u8 = 0xCD;
}

impl Unit for u64 {
    const ZERO: u64 = 0;
    const UNWRITTEN_SLOT: u64 = u64::MAX - 1;
    const NO_BASE: u64 = u64::MAX - 2;
}

/// The request buffers a command reads from and writes into, by request id.
pub trait RequestBuffers<T> {
    fn buffer(&self, req: RequestId) -> Option<&[T]>;
    fn buffer_mut(&mut self, req: RequestId) -> Option<&mut [T]>;
}

impl<T, S: BuildHasher> RequestBuffers<T> for HashMap<u64, Vec<T>, S> {
    fn buffer(&self, req: RequestId) -> Option<&[T]> {
        self.get(&req.0).map(|b| b.as_slice())
    }
    fn buffer_mut(&mut self, req: RequestId) -> Option<&mut [T]> {
        self.get_mut(&req.0).map(|b| b.as_mut_slice())
    }
}

/// A record as the cache device holds it: the engine's record and the
/// checksum of the page data written with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    pub record: SlotRecord,
    pub data_sum: u64,
}

#[derive(Clone, Debug)]
struct Slot<T> {
    page: Option<Box<[T]>>,
    record: Option<StoredRecord>,
    /// Log mode: the batch header this slot holds, if one landed with its
    /// whole payload (a later write over the slot removes it).
    header: Option<Box<LoggedBatch>>,
}

impl<T> Slot<T> {
    const BLANK: Slot<T> = Slot {
        page: None,
        record: None,
        header: None,
    };
}

/// What survives of a command that was in flight at a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partial {
    /// Units of the command's data write that landed, from its start (a
    /// torn write); `usize::MAX`: all of them. For `FreeSlots`, the number of
    /// records zeroed.
    pub units: usize,
    /// A `WritePage`'s record landed (independently of its data: the two
    /// writes are ordered only by the flush after both).
    pub record: bool,
}

impl Partial {
    pub const ALL: Partial = Partial {
        units: usize::MAX,
        record: true,
    };
}

/// Where a device access of a command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The cache device's page data; offsets are `slot × page size`.
    Slots,
    /// The cache device's records (`FreeSlots`).
    Records,
    /// A backing volume; offsets within it.
    Backing(VolumeId),
    /// A volume's backing journal region (journaled write-back); offsets
    /// within it, as the simulator's cost model lays it out: the commit
    /// record at 0, journal page `j` at `(j + 1) × page size` (the real
    /// layout: `docs/on-disk-format.md`, "Backing journal").
    Journal(VolumeId),
    /// The storage's NVRAM (the paper's storage-side journal): no device
    /// time.
    Nvram,
}

/// One device access of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub target: Target,
    pub write: bool,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// A volume's journal as the storage holds it (journaled write-back).
#[derive(Clone, Debug)]
struct Journal<T> {
    /// Staged pages: by journal page (backing journal) or home page (NVRAM).
    staged: HashMap<u64, (u64, Box<[T]>)>,
    /// The committed transaction not yet retired: its home pages by journal page.
    committed: Option<Vec<u64>>,
}

impl<T> Default for Journal<T> {
    fn default() -> Self {
        Journal {
            staged: HashMap::new(),
            committed: None,
        }
    }
}

/// In-memory devices: the cache device's slots and records, the backing
/// volumes.
pub struct Reference<T: Unit> {
    unit_bytes: u64,
    units_per_page: usize,
    slots: Vec<Slot<T>>,
    volume_units: Vec<u64>,
    /// Backing pages by (volume, page index); absent units read as zero.
    backing: HashMap<(u16, u64), Box<[T]>>,
    /// A lying cache device: how many completed cache writes it may still lose.
    volatile_max: usize,
    /// The slots' states before each of the last `volatile_max` cache writes.
    volatile: VecDeque<(u32, Slot<T>)>,
    /// Per volume: its journal (journaled write-back).
    journals: Vec<Journal<T>>,
    /// Log mode: where recovery starts reading the log (the durable
    /// tail's slot and its batch's sequence number), as `AdvanceLog` left it.
    log_tail: (u32, u64),
    /// Log mode: the checkpoint in force (`LogCheckpoint`): where the log
    /// stood through its last batch, and what its replay found.
    log_checkpoint: Option<(LogPosition, Vec<RecoveredSlot>)>,
    log_checkpoint_recoveries: u64,
}

fn sum_of<T: Unit>(page: &[T]) -> u64 {
    // FNV-1a over the units: a stand-in for the driver's crc32c.
    page.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &u| {
        (h ^ u.into()).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl<T: Unit> Reference<T> {
    pub fn new(
        page_size_bytes: u64,
        unit_bytes: u64,
        cache_slots: u64,
        volume_sizes_bytes: &[u64],
    ) -> Reference<T> {
        assert!(unit_bytes > 0);
        assert_eq!(page_size_bytes % unit_bytes, 0, "a page is whole units");
        Reference {
            unit_bytes,
            units_per_page: (page_size_bytes / unit_bytes) as usize,
            slots: (0..cache_slots).map(|_| Slot::BLANK).collect(),
            volume_units: volume_sizes_bytes
                .iter()
                .map(|&s| s.div_ceil(unit_bytes))
                .collect(),
            backing: HashMap::new(),
            volatile_max: 0,
            volatile: VecDeque::new(),
            journals: vec![Journal::default(); volume_sizes_bytes.len()],
            log_tail: (0, 1),
            log_checkpoint: None,
            log_checkpoint_recoveries: 0,
        }
    }

    pub fn units_per_page(&self) -> usize {
        self.units_per_page
    }

    /// The bytes of a page.
    pub(crate) fn page_bytes(&self) -> u32 {
        (self.units_per_page as u64 * self.unit_bytes) as u32
    }

    fn units(&self, bytes: u64) -> usize {
        debug_assert_eq!(bytes % self.unit_bytes, 0, "whole units");
        (bytes / self.unit_bytes) as usize
    }

    /// A slot's page (`UNWRITTEN_SLOT` units if never written).
    pub fn slot_page(&self, slot: SlotIndex) -> Vec<T> {
        match &self.slots[slot.0 as usize].page {
            Some(p) => p.to_vec(),
            None => vec![T::UNWRITTEN_SLOT; self.units_per_page],
        }
    }

    /// The record a slot holds on the cache device.
    pub fn record(&self, slot: SlotIndex) -> Option<StoredRecord> {
        self.slots[slot.0 as usize].record
    }

    /// Slots holding a record.
    pub fn record_count(&self) -> usize {
        self.slots.iter().filter(|s| s.record.is_some()).count()
    }

    /// One unit of a backing volume.
    pub fn backing_unit(&self, volume: VolumeId, unit: u64) -> T {
        let upp = self.units_per_page as u64;
        self.backing
            .get(&(volume.0, unit / upp))
            .map_or(T::ZERO, |p| p[(unit % upp) as usize])
    }

    fn read_backing(&self, volume: VolumeId, first_unit: u64, n: usize) -> Vec<T> {
        (0..n as u64)
            .map(|i| self.backing_unit(volume, first_unit + i))
            .collect()
    }

    fn write_backing(&mut self, volume: VolumeId, first_unit: u64, values: &[T]) {
        let upp = self.units_per_page as u64;
        let end = self.volume_units[volume.0 as usize];
        for (i, &v) in values.iter().enumerate() {
            let u = first_unit + i as u64;
            if u >= end {
                break; // a device ends where its volume does
            }
            let page = self
                .backing
                .entry((volume.0, u / upp))
                .or_insert_with(|| vec![T::ZERO; upp as usize].into_boxed_slice());
            page[(u % upp) as usize] = v;
        }
    }

    fn source(&self, src: Source, n: usize, bufs: &impl RequestBuffers<T>) -> Vec<T> {
        match src {
            Source::Zero => vec![T::ZERO; n],
            Source::Request { req, offset_bytes } => {
                let o = self.units(offset_bytes);
                let b = bufs
                    .buffer(req)
                    .expect("a command's source request is in flight");
                b[o..o + n].to_vec()
            }
        }
    }

    fn into_request(
        bufs: &mut impl RequestBuffers<T>,
        req: RequestId,
        offset_units: usize,
        data: &[T],
    ) {
        let b = bufs
            .buffer_mut(req)
            .expect("a read command's request is in flight");
        b[offset_units..offset_units + data.len()].copy_from_slice(data);
    }

    /// A cache write is about to change `slot`: remember the slot's state
    /// if the device may lose it (lying device).
    fn cache_write(&mut self, slot: u32) {
        if self.volatile_max == 0 {
            return;
        }
        if self.volatile.len() == self.volatile_max {
            self.volatile.pop_front();
        }
        self.volatile
            .push_back((slot, self.slots[slot as usize].clone()));
    }

    /// The first `units` units of `page` land in `slot` (a batch header
    /// there is written over).
    fn land(&mut self, slot: u32, page: &[T], units: usize) {
        let upp = self.units_per_page;
        self.cache_write(slot);
        let s = &mut self.slots[slot as usize];
        let landed = units.min(upp);
        let mut on_device = s
            .page
            .take()
            .map_or_else(|| vec![T::UNWRITTEN_SLOT; upp], |p| p.into_vec());
        on_device[..landed].copy_from_slice(&page[..landed]);
        s.page = Some(on_device.into_boxed_slice());
        if landed > 0 {
            s.header = None;
        }
    }

    /// How many units a command writes (for `FreeSlots`, records): the
    /// range a torn write lands a prefix of. 0 for reads.
    pub fn written_units(&self, cmd: &IoCommand) -> usize {
        match cmd {
            IoCommand::FreeSlots { slots, .. } => slots.len(),
            IoCommand::WritePage { .. } => self.units_per_page,
            IoCommand::WritePages { count, .. } => *count as usize * self.units_per_page,
            IoCommand::WriteBacking { len_bytes, .. } => self.units(*len_bytes),
            IoCommand::Destage { slots, .. } | IoCommand::Stage { slots, .. } => {
                slots.len() * self.units_per_page
            }
            // A commit record or a retire lands whole or not at all (its checksum).
            IoCommand::Commit { .. } | IoCommand::Retire { .. } => 1,
            IoCommand::WriteBatch {
                header,
                next_header,
                ..
            } => (1 + self.payload_slots(*header, *next_header)) * self.units_per_page,
            // A checkpoint is in force whole or not at all (the log-start
            // block that names it is written last).
            IoCommand::AdvanceLog { .. } | IoCommand::LogCheckpoint { .. } => 1,
            IoCommand::ReadPage { .. } | IoCommand::ReadBacking { .. } => 0,
        }
    }

    /// Perform a completed command: everything it writes is durable.
    pub fn execute(&mut self, cmd: &IoCommand, bufs: &mut impl RequestBuffers<T>) {
        self.apply_partial(cmd, Partial::ALL, bufs);
    }

    /// `apply_partial` of a `WritePages`: page by page, in order (a torn
    /// write lands a prefix).
    fn apply_pages_partial(
        &mut self,
        cmd: &IoCommand,
        partial: Partial,
        bufs: &mut impl RequestBuffers<T>,
    ) {
        let mut units = partial.units;
        for page in cmd.page_writes(self.page_bytes()) {
            let landed = units.min(self.units_per_page);
            units -= landed;
            let part = Partial {
                units: landed,
                record: partial.record,
            };
            self.apply_partial(&page.command(), part, bufs);
        }
    }

    /// Perform what `partial` says landed of `cmd` (a command in flight at a
    /// crash). Reads change nothing on a device, so they are skipped unless
    /// complete.
    pub fn apply_partial(
        &mut self,
        cmd: &IoCommand,
        partial: Partial,
        bufs: &mut impl RequestBuffers<T>,
    ) {
        let upp = self.units_per_page;
        let complete = partial == Partial::ALL;
        match cmd {
            IoCommand::WritePages { .. } => self.apply_pages_partial(cmd, partial, bufs),
            IoCommand::WritePage {
                slot,
                base,
                patch,
                record,
                ..
            } => {
                let mut page = match *base {
                    PageBase::None => vec![T::NO_BASE; upp],
                    PageBase::Slot(s) => self.slot_page(s),
                    PageBase::Backing { volume, page } => {
                        self.read_backing(volume, page.0 * upp as u64, upp)
                    }
                };
                let o = self.units(patch.page_offset_bytes as u64);
                let n = self.units(patch.len_bytes as u64);
                let bytes = self.source(patch.src, n, bufs);
                page[o..o + n].copy_from_slice(&bytes);
                self.land(slot.0, &page, partial.units);
                if partial.record {
                    self.slots[slot.0 as usize].record = Some(StoredRecord {
                        record: *record,
                        data_sum: sum_of(&page),
                    });
                }
            }
            IoCommand::FreeSlots { slots, .. } => {
                for s in slots.iter().take(partial.units) {
                    self.cache_write(s.0);
                    self.slots[s.0 as usize].record = None;
                }
            }
            IoCommand::ReadPage {
                slot,
                page_offset_bytes,
                len_bytes,
                req,
                req_offset_bytes,
                ..
            } if complete => {
                let from = self.units(*page_offset_bytes as u64);
                let n = self.units(*len_bytes as u64);
                let page = self.slot_page(*slot);
                let o = self.units(*req_offset_bytes);
                Self::into_request(bufs, *req, o, &page[from..from + n]);
            }
            IoCommand::ReadBacking {
                volume,
                offset_bytes,
                len_bytes,
                req,
                req_offset_bytes,
                ..
            } if complete => {
                let values = self.read_backing(
                    *volume,
                    self.units(*offset_bytes) as u64,
                    self.units(*len_bytes),
                );
                let o = self.units(*req_offset_bytes);
                Self::into_request(bufs, *req, o, &values);
            }
            IoCommand::ReadPage { .. } | IoCommand::ReadBacking { .. } => {}
            IoCommand::WriteBacking {
                volume,
                offset_bytes,
                len_bytes,
                src,
                ..
            } => {
                let n = self.units(*len_bytes);
                let mut values = self.source(*src, n, bufs);
                values.truncate(partial.units);
                self.write_backing(*volume, self.units(*offset_bytes) as u64, &values);
            }
            IoCommand::Destage {
                volume,
                first_page,
                slots,
                ..
            } => {
                let mut run = Vec::with_capacity(slots.len() * upp);
                for s in slots {
                    run.extend(self.slot_page(*s));
                }
                run.truncate(partial.units);
                self.write_backing(*volume, first_page.0 * upp as u64, &run);
            }
            IoCommand::Stage { .. } | IoCommand::Commit { .. } | IoCommand::Retire { .. } => {
                self.apply_journal_command(cmd, complete)
            }
            IoCommand::WriteBatch { .. } => self.apply_batch(cmd, partial, bufs),
            IoCommand::AdvanceLog { .. } | IoCommand::LogCheckpoint { .. } => {
                self.apply_log_start(cmd, partial)
            }
        }
    }

    /// Log mode's log-start block, written last by `AdvanceLog` (where
    /// recovery starts reading the log) and `LogCheckpoint` (the checkpoint
    /// in force: the driver flushes before naming it, so every earlier
    /// write is durable): one block, whole or not.
    fn apply_log_start(&mut self, cmd: &IoCommand, partial: Partial) {
        if partial.units == 0 {
            return;
        }
        match cmd {
            IoCommand::AdvanceLog { tail, tail_seq, .. } => self.log_tail = (tail.0, *tail_seq),
            IoCommand::LogCheckpoint {
                position, entries, ..
            } => {
                self.volatile.clear();
                self.log_checkpoint = Some((position.clone(), entries.clone()));
            }
            _ => unreachable!("a command that writes the log-start block"),
        }
    }

    /// Journaled write-back's commands. A torn stage lands whole here:
    /// staged pages matter only once committed, and a commit follows only
    /// completed stages (the next transaction stages after the last one
    /// retired). A commit or retire lands whole or not at all.
    fn apply_journal_command(&mut self, cmd: &IoCommand, complete: bool) {
        match cmd {
            IoCommand::Stage {
                volume,
                first_page,
                slots,
                journal_page,
                ..
            } => {
                for (i, s) in slots.iter().enumerate() {
                    let home = first_page.0 + i as u64;
                    let key = journal_page.map_or(home, |j| j + i as u64);
                    let page = self.slot_page(*s).into_boxed_slice();
                    self.journals[volume.0 as usize]
                        .staged
                        .insert(key, (home, page));
                }
            }
            IoCommand::Commit {
                volume,
                pages,
                apply,
                ..
            } if complete => {
                if *apply {
                    self.apply_staged(*volume, None);
                } else {
                    let homes = pages.iter().map(|p| p.0).collect();
                    self.journals[volume.0 as usize].committed = Some(homes);
                }
            }
            IoCommand::Retire { volume, .. } if complete => {
                let j = &mut self.journals[volume.0 as usize];
                j.committed = None;
                j.staged.clear();
            }
            _ => {}
        }
    }

    /// Put staged pages in place: those of the committed transaction (by
    /// journal page), or with `None` every staged page (an NVRAM commit).
    fn apply_staged(&mut self, volume: VolumeId, committed: Option<Vec<u64>>) {
        let upp = self.units_per_page as u64;
        let staged = std::mem::take(&mut self.journals[volume.0 as usize].staged);
        let pages: Vec<(u64, Box<[T]>)> = match committed {
            None => staged.into_values().collect(),
            Some(homes) => homes
                .iter()
                .enumerate()
                .map(|(j, &home)| {
                    let (h, data) = staged
                        .get(&(j as u64))
                        .cloned()
                        .expect("a committed journal page was staged");
                    assert_eq!(h, home, "journal page {j} is staged for its home page");
                    (home, data)
                })
                .collect(),
        };
        for (home, data) in pages {
            self.write_backing(volume, home * upp, &data);
        }
    }

    /// The backing is opened after a crash: each volume's committed,
    /// unretired transaction is replayed in place and its journal emptied;
    /// staged pages of uncommitted ones are dropped (an NVRAM journal
    /// discards an open entry when its host fails). Returns the number of
    /// transactions replayed.
    pub fn replay_journals(&mut self) -> usize {
        let mut replayed = 0;
        for v in 0..self.journals.len() {
            let committed = self.journals[v].committed.take();
            if committed.is_some() {
                replayed += 1;
                self.apply_staged(VolumeId(v as u16), committed);
            }
            self.journals[v].staged.clear();
        }
        replayed
    }

    /// Model a cache device that acknowledges writes before they are
    /// durable: the last `writes` completed cache writes (page writes and
    /// record frees) may be lost at a crash. 0: an honest device.
    pub fn set_volatile_writes(&mut self, writes: usize) {
        self.volatile_max = writes;
        self.volatile.clear();
    }

    /// A crash on a lying device: undo its volatile writes, newest first.
    /// Returns how many were lost.
    pub fn lose_volatile(&mut self) -> usize {
        let lost = self.volatile.len();
        while let Some((slot, before)) = self.volatile.pop_back() {
            self.slots[slot as usize] = before;
        }
        lost
    }

    /// The cache device is lost: a blank device replaces it.
    pub fn lose_cache(&mut self) {
        for s in &mut self.slots {
            *s = Slot::BLANK;
        }
        self.volatile.clear();
        self.log_tail = (0, 1);
        self.log_checkpoint = None;
    }

    /// After a crash: the records recovery trusts, in slot order — a record
    /// whose slot's data matches its data checksum — as the store's scan
    /// selects them; every other record is zeroed, as the store does before
    /// serving.
    pub fn recoverable(&mut self) -> Vec<RecoveredSlot> {
        self.volatile.clear();
        let mut found = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(stored) = s.record else { continue };
            let matches = s.page.as_deref().map(sum_of) == Some(stored.data_sum);
            if matches {
                found.push(RecoveredSlot {
                    slot: SlotIndex(i as u32),
                    record: stored.record,
                });
            } else {
                s.record = None;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Patch;
    use crate::types::{IoId, PageIndex, PageKey};

    fn write_page(slot: u32, base: PageBase, off: u32, len: u32, req: u64) -> IoCommand {
        IoCommand::WritePage {
            io: IoId(1),
            slot: SlotIndex(slot),
            base,
            patch: Patch {
                page_offset_bytes: off,
                len_bytes: len,
                src: Source::Request {
                    req: RequestId(req),
                    offset_bytes: 0,
                },
            },
            record: SlotRecord {
                key: PageKey::new(VolumeId(0), PageIndex(0)),
                seq: 1,
                dirty: true,
            },
        }
    }

    #[test]
    fn a_partial_page_write_merges_onto_the_backing_and_destages() {
        let mut r: Reference<u8> = Reference::new(8, 1, 2, &[20]);
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        bufs.insert(7, vec![1, 2, 3]);
        r.execute(
            &IoCommand::WriteBacking {
                io: IoId(0),
                volume: VolumeId(0),
                offset_bytes: 16,
                len_bytes: 3,
                src: Source::Request {
                    req: RequestId(7),
                    offset_bytes: 0,
                },
                fua: false,
            },
            &mut bufs,
        );
        let base = PageBase::Backing {
            volume: VolumeId(0),
            page: PageIndex(2),
        };
        r.execute(&write_page(1, base, 3, 3, 7), &mut bufs);
        assert_eq!(r.slot_page(SlotIndex(1)), vec![1, 2, 3, 1, 2, 3, 0, 0]);
        r.execute(
            &IoCommand::Destage {
                io: IoId(2),
                volume: VolumeId(0),
                first_page: PageIndex(2),
                slots: vec![SlotIndex(1)],
            },
            &mut bufs,
        );
        // The volume ends at byte 20: the destage is clipped there.
        let backing: Vec<u8> = (16..24).map(|u| r.backing_unit(VolumeId(0), u)).collect();
        assert_eq!(backing, vec![1, 2, 3, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn recovery_keeps_only_records_whose_data_matches() {
        let mut r: Reference<u8> = Reference::new(4, 1, 3, &[64]);
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        bufs.insert(1, vec![9; 4]);
        r.execute(&write_page(0, PageBase::None, 0, 4, 1), &mut bufs);
        // Torn: half the data, the record landed.
        let torn = Partial {
            units: 2,
            record: true,
        };
        r.apply_partial(&write_page(1, PageBase::None, 0, 4, 1), torn, &mut bufs);
        // Whole data, no record.
        let no_record = Partial {
            units: usize::MAX,
            record: false,
        };
        r.apply_partial(
            &write_page(2, PageBase::None, 0, 4, 1),
            no_record,
            &mut bufs,
        );
        let found = r.recoverable();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].slot, SlotIndex(0));
        assert_eq!(r.record_count(), 1, "the torn version's record is zeroed");
    }

    #[test]
    fn a_lying_device_loses_its_last_writes() {
        let mut r: Reference<u8> = Reference::new(4, 1, 2, &[64]);
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        bufs.insert(1, vec![9; 4]);
        r.set_volatile_writes(1);
        r.execute(&write_page(0, PageBase::None, 0, 4, 1), &mut bufs);
        r.execute(&write_page(1, PageBase::None, 0, 4, 1), &mut bufs);
        assert_eq!(r.lose_volatile(), 1);
        assert!(r.record(SlotIndex(0)).is_some());
        assert!(r.record(SlotIndex(1)).is_none());
        assert_eq!(r.slot_page(SlotIndex(1)), vec![0xEE; 4]);
    }
}
