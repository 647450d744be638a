//! The engine's vocabulary with its driver: requests in, I/O commands out,
//! completions in, responses out. Payloads never pass through the engine:
//! commands name buffers (a request's buffer, a cache slot, a backing range)
//! and the driver moves the bytes.

use crate::types::{IoId, PageIndex, PageKey, RequestId, SlotIndex, VolumeId};
use thiserror::Error;

/// What a client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Read,
    Write,
    /// Write zeros; no payload.
    WriteZeroes,
    /// The client no longer needs the range (advisory).
    Trim,
    /// Every write acknowledged before this request is made durable. Its
    /// range (0, 0: the whole volume) is what a critical issuer's flush
    /// waits for: the bypass writes in flight there are promoted (a front
    /// end that knows it, as a file's fsync on the mount, names the file's
    /// range; NBD's FLUSH is the volume's).
    Flush,
}

/// Tags carried by a request, for policies present and to come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestFlags {
    /// Force unit access: durable when acknowledged (NBD FUA).
    pub fua: bool,
    /// The application waits for this write (sync / O_DSYNC / fsync).
    pub sync: bool,
    /// Request-oriented admission: an application request waits on it.
    pub critical: bool,
    /// The process or stream that issued it.
    pub issuer: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub volume: VolumeId,
    pub kind: RequestKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub flags: RequestFlags,
}

/// Why a request was refused before any work (the driver answers at once).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("unknown volume {0}")]
    UnknownVolume(u16),
    #[error("range {offset_bytes}+{len_bytes} is beyond the end of volume {volume} ({size_bytes} bytes)")]
    OutOfRange {
        volume: u16,
        offset_bytes: u64,
        len_bytes: u64,
        size_bytes: u64,
    },
    #[error("request of {pages} pages is larger than the whole cache ({slots} slots)")]
    LargerThanCache { pages: u64, slots: u64 },
    #[error("request of {pages} pages is larger than the whole journal ({journal_pages} pages; journaled write-back checkpoints a write whole)")]
    LargerThanJournal { pages: u64, journal_pages: u64 },
    #[error("request of {pages} pages is larger than this cache takes in one request ({pages_max} pages: a quarter of its log)")]
    LargerThanLog { pages: u64, pages_max: u64 },
    #[error("too many requests in flight ({0}); retry after a completion")]
    Busy(u32),
}

/// How an I/O failed, as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum IoError {
    #[error("I/O error")]
    Io,
    #[error("no space left on device")]
    NoSpace,
}

/// The outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub id: RequestId,
    pub result: Result<(), IoError>,
    /// A command still in flight reads the request's buffer: a promoted
    /// bypass answered from the cache before its original backing write
    /// landed (only with `EngineConfig::buffers_outlive_answers`). Keep the
    /// buffer, and the id unused, until the `WriteBacking` naming it completes.
    pub buffer_in_use: bool,
}

/// Where bytes of a patch come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The request's own buffer, from this offset.
    Request {
        req: RequestId,
        offset_bytes: u64,
    },
    Zero,
}

/// What a new page version starts from before the patch is laid over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageBase {
    /// The patch covers the whole page.
    None,
    /// The previous version in the cache.
    Slot(SlotIndex),
    /// The backing's page (stage, for a partial write to an uncached page).
    Backing { volume: VolumeId, page: PageIndex },
}

/// Bytes laid over a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    pub page_offset_bytes: u32,
    pub len_bytes: u32,
    pub src: Source,
}

/// What the driver persists beside a page version (persistent caches), so
/// that recovery finds every page version after a crash: the newest `seq` of
/// a page wins; a record whose data does not match its checksum is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    pub key: PageKey,
    /// Version number, increasing over the cache's whole life.
    pub seq: u64,
    /// Newer than the backing (false: a clean copy).
    pub dirty: bool,
}

/// The byte sizes of a `WriteBatch`'s header (format 3,
/// `docs/on-disk-format.md`): the engine bounds a batch by them, the
/// driver's format encodes to them.
pub mod batch_header {
    /// Bytes before the extents.
    pub const FIXED_BYTES: usize = 64;
    /// Bytes per extent.
    pub const EXTENT_BYTES: usize = 24;
    /// Bytes per freed slot.
    pub const FREE_BYTES: usize = 4;

    /// Slots of a batch's payload: every slot after its header up to the
    /// next header, the ring going on at slot 0 (its pages, then zeros: a
    /// failed batch written again carries no page and keeps its place).
    pub fn payload_slots(header: u32, next_header: u32, ring: u64) -> usize {
        ((next_header as u64 + 2 * ring - header as u64 - 1) % ring) as usize
    }
}

/// I/O for the driver to perform. Each completes with `handle_completion(io, ..)`.
/// Contract: a command completes only when its writes are durable: a cache
/// write on the cache device (the driver syncs, or the device is
/// non-volatile), a backing write on the backing (FUA or a sync). The engine
/// relies on this for every acknowledgement and for freeing destaged slots.
/// Exception: a `WritePage` with a clean record (a read miss's copy) may
/// complete once written, before it is durable; recovery ignores clean records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoCommand {
    /// Build a whole page in cache slot `slot`: read `base`, lay `patch` over it, write it,
    /// and (persistent caches) its `record`; complete when both are durable.
    WritePage {
        io: IoId,
        slot: SlotIndex,
        base: PageBase,
        patch: Patch,
        record: SlotRecord,
    },
    /// Log mode, inside a `WriteBatch`: `count` whole pages of one request
    /// (or zeros), an extent end to end: page `i` goes to slot
    /// `first_slot + i` (consecutive, not passing the ring's end), comes
    /// from `src` at `i` pages on, and is recorded as `first`'s page plus
    /// `i` with version number `first.seq + i`. One completion for all.
    WritePages {
        io: IoId,
        first_slot: SlotIndex,
        count: u32,
        first: SlotRecord,
        src: Source,
    },
    /// Persistent caches: durably mark these slots free (their records no
    /// longer name any page); the engine reuses them only after this completes.
    /// Every slot whose record is dirty leaves through here before reuse; only
    /// clean copies (read-miss inserts, recorded clean, ignored by recovery)
    /// are evicted and rewritten directly.
    FreeSlots { io: IoId, slots: Vec<SlotIndex> },
    /// Copy part of a cached page into the request's buffer.
    ReadPage {
        io: IoId,
        slot: SlotIndex,
        page_offset_bytes: u32,
        len_bytes: u32,
        req: RequestId,
        req_offset_bytes: u64,
    },
    /// Read backing bytes into the request's buffer.
    ReadBacking {
        io: IoId,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        req: RequestId,
        req_offset_bytes: u64,
    },
    /// Write bytes to the backing (write-through, write-around).
    WriteBacking {
        io: IoId,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        src: Source,
        fua: bool,
    },
    /// Destage: write the cached pages `slots` to consecutive backing pages from `first_page`.
    Destage {
        io: IoId,
        volume: VolumeId,
        first_page: PageIndex,
        slots: Vec<SlotIndex>,
    },
    /// Journaled write-back: put the cached pages `slots` (home pages from
    /// `first_page` on), part of transaction `txn`, aside at the backing,
    /// not visible in place: in its journal from page `journal_page` on
    /// (a backing journal), or in its NVRAM (the paper's storage-side
    /// journal, a simulator model: `journal_page` None). Durable once the
    /// `Commit` after it is.
    Stage {
        io: IoId,
        volume: VolumeId,
        txn: u64,
        first_page: PageIndex,
        slots: Vec<SlotIndex>,
        journal_page: Option<u64>,
    },
    /// Make every page staged for `txn` on `volume` durable at once.
    /// `pages[i]` is the home page of journal page `i`. With `apply` (an
    /// NVRAM journal) the storage also puts them in place, atomically;
    /// without (a backing journal), a crash from here on finds the
    /// transaction and replays it, and the host writes the pages in place
    /// (`Destage`) and then sends `Retire`.
    Commit {
        io: IoId,
        volume: VolumeId,
        txn: u64,
        pages: Vec<PageIndex>,
        apply: bool,
    },
    /// Log mode (`EngineConfig::log`, format 3): one batch of the cache
    /// device's log, to be written with one write (two where it reaches the
    /// ring's end and goes on at slot 0): a header in slot `header`, then
    /// the `pages` (`WritePage`s of slots `header + 1 …` in order, each
    /// built as its command says) and, in the header, the extents they make
    /// and the slots of the `frees` (`FreeSlots`). `seq` is the batch's
    /// sequence number (one more than the batch before it); the next batch
    /// starts at `next_header`. Completes when durable (a persist-on-flush
    /// driver: when written) with one result for the whole batch; that
    /// completes every inner command not completed before (a driver may
    /// complete a page whose base could not be read on its own, with its
    /// error, and leave its slot out of the header). Batches are issued one
    /// at a time, in sequence order.
    WriteBatch {
        io: IoId,
        header: SlotIndex,
        seq: u64,
        next_header: SlotIndex,
        pages: Vec<IoCommand>,
        frees: Vec<IoCommand>,
    },
    /// Log mode: durably record that recovery starts at the batch whose
    /// header is `tail` (sequence number `tail_seq`): every batch before it
    /// is gone, and its slots will be written over once this completes.
    /// The driver makes every earlier write durable first.
    AdvanceLog {
        io: IoId,
        tail: SlotIndex,
        tail_seq: u64,
    },
    /// Log mode: save what a replay of the log through batch
    /// `position.next_seq - 1` finds (`entries`, in log order: a later entry
    /// of a page replaces an earlier one; their `seq` is 0, older than any
    /// version in the log), so that recovery reads it and the batches after
    /// it, not the whole log. The driver writes the copy not in force, makes
    /// it and every earlier write durable, then names it in the log-start
    /// block (beside the tail in force then): a crash leaves the
    /// older checkpoint or this one in force, never a part of one.
    LogCheckpoint {
        io: IoId,
        position: crate::engine::LogPosition,
        entries: Vec<crate::engine::RecoveredSlot>,
    },
    /// Transaction `txn`'s pages are in place on `volume`: its journal
    /// entry is durably dropped, so the journal may take the next one.
    Retire {
        io: IoId,
        volume: VolumeId,
        txn: u64,
    },
}

impl IoCommand {
    pub fn io(&self) -> IoId {
        match *self {
            IoCommand::WriteBatch { io, .. }
            | IoCommand::AdvanceLog { io, .. }
            | IoCommand::LogCheckpoint { io, .. } => io,
            IoCommand::WritePage { io, .. }
            | IoCommand::WritePages { io, .. }
            | IoCommand::ReadPage { io, .. }
            | IoCommand::ReadBacking { io, .. }
            | IoCommand::WriteBacking { io, .. }
            | IoCommand::Destage { io, .. }
            | IoCommand::Stage { io, .. }
            | IoCommand::Commit { io, .. }
            | IoCommand::Retire { io, .. }
            | IoCommand::FreeSlots { io, .. } => io,
        }
    }

    /// The pages a `WritePage` (one) or `WritePages` (each of its run)
    /// writes, one by one, as `WritePage`s would; none for other commands.
    pub fn page_writes(&self, page_size_bytes: u32) -> PageWrites<'_> {
        let count = match self {
            IoCommand::WritePage { .. } => 1,
            IoCommand::WritePages { count, .. } => *count,
            _ => 0,
        };
        PageWrites {
            cmd: self,
            page_size_bytes,
            next: 0,
            count,
        }
    }

    /// How many pages `page_writes` gives.
    pub fn page_count(&self) -> u32 {
        match self {
            IoCommand::WritePage { .. } => 1,
            IoCommand::WritePages { count, .. } => *count,
            _ => 0,
        }
    }
}

/// One page of a `WritePage` or `WritePages` (`IoCommand::page_writes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageWrite {
    pub io: IoId,
    pub slot: SlotIndex,
    pub base: PageBase,
    pub patch: Patch,
    pub record: SlotRecord,
}

impl PageWrite {
    /// The `WritePage` that writes this page alone.
    pub fn command(&self) -> IoCommand {
        IoCommand::WritePage {
            io: self.io,
            slot: self.slot,
            base: self.base,
            patch: self.patch,
            record: self.record,
        }
    }
}

/// The iterator of `IoCommand::page_writes`.
pub struct PageWrites<'a> {
    cmd: &'a IoCommand,
    page_size_bytes: u32,
    next: u32,
    count: u32,
}

impl Iterator for PageWrites<'_> {
    type Item = PageWrite;

    fn next(&mut self) -> Option<PageWrite> {
        if self.next == self.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(match *self.cmd {
            IoCommand::WritePage {
                io,
                slot,
                base,
                patch,
                record,
            } => PageWrite {
                io,
                slot,
                base,
                patch,
                record,
            },
            IoCommand::WritePages {
                io,
                first_slot,
                first,
                src,
                ..
            } => {
                let at = i as u64 * self.page_size_bytes as u64;
                let src = match src {
                    Source::Request { req, offset_bytes } => Source::Request {
                        req,
                        offset_bytes: offset_bytes + at,
                    },
                    Source::Zero => Source::Zero,
                };
                let page = PageIndex(first.key.page().0 + i as u64);
                PageWrite {
                    io,
                    slot: SlotIndex(first_slot.0 + i),
                    base: PageBase::None,
                    patch: Patch {
                        page_offset_bytes: 0,
                        len_bytes: self.page_size_bytes,
                        src,
                    },
                    record: SlotRecord {
                        key: PageKey::new(first.key.volume(), page),
                        seq: first.seq + i as u64,
                        dirty: first.dirty,
                    },
                }
            }
            _ => unreachable!("only page writes have pages"),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.next) as usize;
        (n, Some(n))
    }
}
