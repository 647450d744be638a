//! The engine: the whole cache as a sans-IO state machine.
//!
//! Call order (the driver's loop):
//! 1. `handle_request(now, req)` for each client request (or a `SubmitError`);
//! 2. `handle_completion(now, io, result)` for each finished `IoCommand`;
//! 3. `handle_timeout(now)` once `now >= poll_timeout()`.
//!
//! After any of these, drain `poll_command()` (submit each to the devices)
//! and `poll_response()` (answer the client). The engine never reads a clock,
//! sleeps, or performs I/O; the same code runs under the simulator and the
//! real driver, and a run is replayable from its inputs.
//!
//! Per request the engine does metadata work only: directory lookups, slot
//! allocation, dirty bookkeeping, destage decisions. See `slots` for the
//! copy-on-write rule that keeps every acknowledged page version intact, and
//! `dirty` for the sorted set of dirty pages that write groups, their state
//! and the CSCAN/WOW sweep live in.

mod dirty;
mod slots;
mod stats;

pub use stats::Stats;

use crate::command::*;
use crate::config::{ConfigError, EngineConfig, WritePolicy};
use crate::geometry::{Geometry, PagePiece};
use crate::policy::destage_order::{build_destage_order, Candidates, DestageOrder, GroupHit};
use crate::policy::destage_rate::{build_destage_rate, DestageRate, RateInput};
use crate::policy::replacement::{build_replacement, Replacement};
use crate::time::Nanos;
use crate::types::*;
use dirty::{DirtySet, E_CANDIDATE, E_RECENT, E_SEQUENTIAL};
use rustc_hash::FxHashMap as HashMap;
use slots::{
    SlotState, Slots, FLAG_DESTAGING, FLAG_FILL_CLEAN, FLAG_FREEING, FLAG_FREE_SENT, FLAG_OLD,
};
use std::collections::VecDeque;
use thiserror::Error;

/// The destage order's view of the candidates, borrowed field by field.
macro_rules! view {
    ($engine:ident) => {
        &mut GroupView {
            dirty: &mut $engine.dirty,
            keys: $engine.slots.keys(),
            candidates: $engine.candidates,
            skips: &mut $engine.stats.destage_skips,
        }
    };
}

/// Volumes per engine (the page key keeps 16 bits for the volume).
pub const VOLUMES_MAX: usize = 1 << 16;
/// Buckets of the recent-write filter that guards read-miss insertion.
const WRITE_FILTER_BUCKETS: usize = 4096;
/// Persistent caches free slot records in batches of this many...
const FREE_BATCH_SLOTS: usize = 32;
/// ...or at most this late.
const FREE_DELAY_NS: u64 = 1_000_000;
/// Destage pause after a backing error, doubling up to the max.
const DESTAGE_RETRY_NS_MIN: u64 = 10_000_000;
const DESTAGE_RETRY_NS_MAX: u64 = 5_000_000_000;

/// A page version the driver found on the cache device after a restart
/// (its record and data checksums are good).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveredSlot {
    pub slot: SlotIndex,
    pub record: SlotRecord,
}

#[derive(Debug, Error, PartialEq)]
pub enum RecoveryError {
    #[error("recovery needs a persistent configuration (persistent = true)")]
    NotPersistent,
    #[error("engine configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("slot {slot} is beyond the cache's {slots} slots")]
    SlotOutOfRange { slot: u32, slots: u64 },
    #[error("slot {0} appears twice")]
    DuplicateSlot(u32),
    #[error("slot {slot} holds page {page} of volume {volume}, which is not one of the {volumes} volumes given")]
    UnknownVolume {
        slot: u32,
        volume: u16,
        page: u64,
        volumes: usize,
    },
    #[error(
        "slot {slot} holds page {page} of volume {volume}, beyond its size of {size_bytes} bytes"
    )]
    BeyondVolume {
        slot: u32,
        volume: u16,
        page: u64,
        size_bytes: u64,
    },
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum EngineError {
    #[error("volume of {size_bytes} bytes is larger than the {max_bytes} bytes a volume may have")]
    VolumeTooLarge { size_bytes: u64, max_bytes: u64 },
    #[error("too many volumes (at most {VOLUMES_MAX})")]
    TooManyVolumes,
    #[error("completion for unknown I/O {0:?}")]
    UnknownIo(IoId),
}

struct Volume {
    size_bytes: u64,
}

/// A request in flight.
struct Req {
    id: RequestId,
    kind: RequestKind,
    volume: VolumeId,
    offset_bytes: u64,
    len_bytes: u64,
    flags: RequestFlags,
    /// Commands issued plus pieces deferred, not yet done.
    pending: u32,
    failed: Option<IoError>,
    stalled_at: Option<Nanos>,
    /// Slots taken at admission for this write's new page versions.
    reserved: Vec<SlotIndex>,
    /// Write-through: slots that become final when the whole request is done.
    finalize: Vec<SlotIndex>,
}

/// What a deferred piece will do when the slot it waits for is written.
#[derive(Clone, Copy)]
enum Deferred {
    Write {
        req: u32,
        piece: PagePiece,
        through: bool,
    },
    Read {
        req: u32,
        piece: PagePiece,
    },
}

/// Dirty bookkeeping an admitted write did, undone if its page write fails.
#[derive(Clone, Copy, Default)]
struct Undo {
    made_dirty: bool,
    /// A write-through version: its backing write goes out beside it, so if
    /// this cache write fails the backing may still take the new bytes, and
    /// the previous clean copy must not come back (it could be older than
    /// the backing: a read would return it, and after its eviction the
    /// backing's newer bytes).
    through_clean: bool,
}

enum IoCtx {
    Fill {
        req: u32,
        slot: SlotIndex,
        old: Option<(SlotIndex, SlotState)>,
        undo: Undo,
    },
    InsertFill {
        req: u32,
        slot: SlotIndex,
    },
    ReadSlot {
        req: u32,
        slot: SlotIndex,
    },
    FreeSlots {
        slots: Vec<SlotIndex>,
    },
    ReadBacking {
        req: u32,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        req_offset_bytes: u64,
        write_seq: u64,
    },
    WriteBacking {
        req: u32,
    },
    Destage {
        slots: Vec<SlotIndex>,
    },
}

pub struct Engine {
    config: EngineConfig,
    geometry: Geometry,
    volumes: Vec<Volume>,
    slots: Slots,
    /// Dirty pages sorted by key; write groups and their state live in it.
    dirty: DirtySet,
    /// Groups in the destage order's candidate set (flag `E_CANDIDATE`).
    candidates: usize,
    order: Box<dyn DestageOrder>,
    rate: Box<dyn DestageRate>,
    replacement: Box<dyn Replacement>,

    reqs: Vec<Option<Req>>,
    reqs_free: Vec<u32>,
    reqs_live: u32,
    stalled: VecDeque<u32>,
    deferred: HashMap<u32, VecDeque<Deferred>>,
    /// Pages with old versions not yet gone for good: still being destaged,
    /// or (persistent caches) whose record still names the page. Their newer
    /// version waits to be destaged, so two destages of one page never race
    /// at the backing, and a page's newest record is never reused while an
    /// older one could be found by recovery.
    /// Each such page's old versions, oldest first: they retire in version
    /// order, and (persistent caches) their records are freed in that order,
    /// one at a time, so a crash never leaves an older record as the newest.
    old_versions: HashMap<u64, VecDeque<SlotIndex>>,
    /// Stale slots waiting for a `FreeSlots` command (persistent caches).
    to_free: Vec<SlotIndex>,
    /// Failed write-through requests held until a slot's record is zeroed
    /// (see the `Fill` error path).
    free_waiters: HashMap<u32, Vec<u32>>,
    /// When the oldest of `to_free` must go out.
    frees_due: Option<Nanos>,
    /// Version number for the next page version (`SlotRecord::seq`).
    next_seq: u64,

    ios: Vec<Option<IoCtx>>,
    io_gens: Vec<u32>,
    ios_free: Vec<u32>,

    commands: VecDeque<IoCommand>,
    responses: VecDeque<Response>,

    destages_in_flight: u32,
    last_destage_sequential: bool,
    last_destage_sector: Option<u64>,
    destage_paused_until: Option<Nanos>,
    destage_retry_ns: u64,
    draining: bool,
    write_seq: u64,
    write_filter: Vec<u64>,
    /// Backing writes in flight per filter bucket.
    backing_writes_in_flight: Vec<u32>,
    positions: Vec<u32>,
    stats: Stats,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Engine, ConfigError> {
        let geometry = config.validate()?;
        let slots = config.cache_slots as u32;
        let replacement = build_replacement(&config.replacement, slots as usize)
            .map_err(|e| ConfigError::Replacement(e.to_string()))?;
        let order = build_destage_order(&config.destage_order)?;
        let rate = build_destage_rate(&config.destage_rate, config.rate)?;
        let requests_max = config.requests_max as usize;
        Ok(Engine {
            dirty: DirtySet::new(geometry.group_pages()),
            candidates: 0,
            slots: Slots::new(slots, requests_max * 4),
            geometry,
            volumes: Vec::new(),
            order,
            rate,
            replacement,
            reqs: Vec::with_capacity(requests_max),
            reqs_free: Vec::new(),
            reqs_live: 0,
            stalled: VecDeque::with_capacity(requests_max),
            deferred: HashMap::default(),
            old_versions: HashMap::default(),
            to_free: Vec::new(),
            free_waiters: HashMap::default(),
            frees_due: None,
            next_seq: 1,
            ios: Vec::new(),
            io_gens: Vec::new(),
            ios_free: Vec::new(),
            commands: VecDeque::new(),
            responses: VecDeque::new(),
            destages_in_flight: 0,
            last_destage_sequential: false,
            last_destage_sector: None,
            destage_paused_until: None,
            destage_retry_ns: DESTAGE_RETRY_NS_MIN,
            draining: false,
            write_seq: 0,
            write_filter: vec![0; WRITE_FILTER_BUCKETS],
            backing_writes_in_flight: vec![0; WRITE_FILTER_BUCKETS],
            positions: Vec::with_capacity(geometry.group_pages() as usize),
            stats: Stats::default(),
            config,
        })
    }

    /// Rebuild the cache after a restart from the page versions found on the
    /// cache device. The newest version of each page becomes current if its
    /// record is dirty (clean copies are dropped); older versions are freed through
    /// `FreeSlots` (the first commands polled), and the newer version is not
    /// destaged before they are. Every slot not found is free.
    pub fn recover(
        config: EngineConfig,
        volume_sizes_bytes: &[u64],
        mut found: Vec<RecoveredSlot>,
    ) -> Result<Engine, RecoveryError> {
        if !config.persistent {
            return Err(RecoveryError::NotPersistent);
        }
        let mut engine = Engine::new(config)?;
        for &size in volume_sizes_bytes {
            engine.add_volume(size)?;
        }
        let slots = engine.slots.len() as u64;
        let mut seen = vec![false; slots as usize];
        for f in &found {
            let (slot, key) = (f.slot.0, f.record.key);
            if slot as u64 >= slots {
                return Err(RecoveryError::SlotOutOfRange { slot, slots });
            }
            if std::mem::replace(&mut seen[slot as usize], true) {
                return Err(RecoveryError::DuplicateSlot(slot));
            }
            let (volume, page) = (key.volume().0, key.page().0);
            let Some(vol) = engine.volumes.get(volume as usize) else {
                return Err(RecoveryError::UnknownVolume {
                    slot,
                    volume,
                    page,
                    volumes: engine.volumes.len(),
                });
            };
            if page >= engine.geometry.pages_in(vol.size_bytes) {
                return Err(RecoveryError::BeyondVolume {
                    slot,
                    volume,
                    page,
                    size_bytes: vol.size_bytes,
                });
            }
        }
        let used: Vec<SlotIndex> = found.iter().map(|f| f.slot).collect();
        engine.slots.exclude_from_pool(&used);
        // Each page's versions, oldest first.
        found.sort_by_key(|f| (f.record.key, f.record.seq));
        for (i, f) in found.iter().enumerate() {
            engine.next_seq = engine.next_seq.max(f.record.seq + 1);
            let (slot, key) = (f.slot, f.record.key);
            let newest = found.get(i + 1).is_none_or(|n| n.record.key != key);
            engine.slots.set_key(slot, key);
            if newest && f.record.dirty {
                engine.slots.map(slot, key);
                engine.slots.set_state(slot, SlotState::Dirty);
                engine.mark_dirty(key);
            } else {
                // An older version, or a clean copy: free it for good, oldest
                // first. Clean copies are not trusted after a crash: one
                // dropped just before (a write-around, say) could come back.
                engine.slots.set_state(slot, SlotState::Stale);
                engine.push_old(slot);
                engine.free_slot(slot);
            }
        }
        engine.emit_frees(Nanos::MAX);
        Ok(engine)
    }

    pub fn add_volume(&mut self, size_bytes: u64) -> Result<VolumeId, EngineError> {
        let max_bytes = self.geometry.volume_size_bytes_max();
        if size_bytes > max_bytes {
            return Err(EngineError::VolumeTooLarge {
                size_bytes,
                max_bytes,
            });
        }
        if self.volumes.len() >= VOLUMES_MAX {
            return Err(EngineError::TooManyVolumes);
        }
        self.volumes.push(Volume { size_bytes });
        Ok(VolumeId((self.volumes.len() - 1) as u16))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Write groups holding dirty pages.
    pub fn dirty_groups(&self) -> usize {
        self.dirty.groups()
    }
    pub fn dirty_pages(&self) -> u64 {
        self.dirty.pages() as u64
    }
    pub fn capacity_pages(&self) -> u64 {
        self.slots.len() as u64
    }
    /// Current (low, high) destage thresholds in pages.
    pub fn thresholds_pages(&self) -> (u64, u64) {
        self.rate.thresholds_pages(self.capacity_pages())
    }
    pub fn requests_in_flight(&self) -> u32 {
        self.reqs_live
    }
    pub fn destages_in_flight(&self) -> u32 {
        self.destages_in_flight
    }
    /// Nothing in flight and nothing to hand out.
    pub fn is_idle(&self) -> bool {
        self.reqs_live == 0
            && self.destages_in_flight == 0
            && self.commands.is_empty()
            && self.responses.is_empty()
    }

    /// Destage everything at full rate until no dirty page is left (shutdown, flush tool).
    pub fn start_drain(&mut self) {
        self.draining = true;
        self.start_destages();
        self.emit_frees(Nanos::MAX);
    }
    /// Issue every slot free gathered so far now, batch or no batch (before a
    /// shutdown, so the cache is left with no stale records it could avoid).
    pub fn flush_frees(&mut self) {
        self.emit_frees(Nanos::MAX);
    }
    pub fn stop_drain(&mut self) {
        self.draining = false;
    }

    /// Heap bytes of all engine metadata (directory, groups, policies, queues).
    pub fn metadata_bytes(&self) -> usize {
        self.slots.heap_bytes()
            + self.dirty.heap_bytes()
            + self.order.metadata_bytes()
            + self.replacement.metadata_bytes()
            + self.write_filter.capacity() * 8
            + self.reqs.capacity() * std::mem::size_of::<Option<Req>>()
    }

    pub fn poll_command(&mut self) -> Option<IoCommand> {
        self.commands.pop_front()
    }
    pub fn poll_response(&mut self) -> Option<Response> {
        self.responses.pop_front()
    }
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match (self.destage_paused_until, self.frees_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    pub fn handle_timeout(&mut self, now: Nanos) {
        if let Some(t) = self.destage_paused_until {
            if now >= t {
                self.destage_paused_until = None;
                self.start_destages();
            }
        }
        self.emit_frees(now);
    }

    // ----- requests -------------------------------------------------------

    pub fn handle_request(&mut self, now: Nanos, req: Request) -> Result<(), SubmitError> {
        let vol = self
            .volumes
            .get(req.volume.0 as usize)
            .ok_or(SubmitError::UnknownVolume(req.volume.0))?;
        let end = req.offset_bytes.checked_add(req.len_bytes);
        if req.kind != RequestKind::Flush && end.is_none_or(|e| e > vol.size_bytes) {
            return Err(SubmitError::OutOfRange {
                volume: req.volume.0,
                offset_bytes: req.offset_bytes,
                len_bytes: req.len_bytes,
                size_bytes: vol.size_bytes,
            });
        }
        let is_write = matches!(req.kind, RequestKind::Write | RequestKind::WriteZeroes);
        if is_write {
            let pages = self.pages_of(req.offset_bytes, req.len_bytes);
            if pages > self.slots.len() as u64
                && self.config.write_policy != WritePolicy::WriteAround
            {
                return Err(SubmitError::LargerThanCache {
                    pages,
                    slots: self.slots.len() as u64,
                });
            }
        }
        if self.reqs_live >= self.config.requests_max {
            return Err(SubmitError::Busy(self.config.requests_max));
        }
        let ri = self.alloc_req(req);
        match req.kind {
            RequestKind::Read => self.admit_read(ri),
            RequestKind::Write | RequestKind::WriteZeroes => {
                if self.stalled.is_empty() && self.has_room_for(ri) {
                    self.admit_write(ri);
                } else {
                    self.stats.stalls += 1;
                    self.req_mut(ri).stalled_at = Some(now);
                    self.stalled.push_back(ri);
                }
            }
            RequestKind::Trim => self.admit_trim(ri),
            RequestKind::Flush => {
                // Every acknowledged write is durable already (see IoCommand's contract).
                self.stats.flushes += 1;
            }
        }
        self.maybe_finish(ri);
        self.drain_stalls(now);
        self.start_destages();
        self.emit_frees(now);
        Ok(())
    }

    fn pages_of(&self, offset_bytes: u64, len_bytes: u64) -> u64 {
        if len_bytes == 0 {
            return 0;
        }
        let first = self.geometry.page_of(offset_bytes).0;
        let last = self.geometry.page_of(offset_bytes + len_bytes - 1).0;
        last - first + 1
    }

    fn alloc_req(&mut self, r: Request) -> u32 {
        let ri = match self.reqs_free.pop() {
            Some(ri) => ri,
            None => {
                self.reqs.push(None);
                (self.reqs.len() - 1) as u32
            }
        };
        // Reuse the vectors of an earlier request where possible.
        let (mut reserved, mut finalize) = (Vec::new(), Vec::new());
        if let Some(old) = self.reqs[ri as usize].take() {
            reserved = old.reserved;
            finalize = old.finalize;
            reserved.clear();
            finalize.clear();
        }
        self.reqs[ri as usize] = Some(Req {
            id: r.id,
            kind: r.kind,
            volume: r.volume,
            offset_bytes: r.offset_bytes,
            len_bytes: r.len_bytes,
            flags: r.flags,
            pending: 0,
            failed: None,
            stalled_at: None,
            reserved,
            finalize,
        });
        self.reqs_live += 1;
        ri
    }

    fn req(&self, ri: u32) -> &Req {
        self.reqs[ri as usize].as_ref().expect("live request")
    }
    fn req_mut(&mut self, ri: u32) -> &mut Req {
        self.reqs[ri as usize].as_mut().expect("live request")
    }

    /// Answer the request if nothing of it is pending.
    fn maybe_finish(&mut self, ri: u32) {
        let r = self.req(ri);
        if r.pending > 0 || r.stalled_at.is_some() {
            return;
        }
        let failed = r.failed;
        let finalize = std::mem::take(&mut self.req_mut(ri).finalize);
        for &slot in &finalize {
            self.finalize_through(slot, failed.is_none());
        }
        let r = self.req_mut(ri);
        r.finalize = finalize;
        debug_assert!(r.reserved.is_empty(), "reserved slots left over");
        let response = Response {
            id: r.id,
            result: failed.map_or(Ok(()), Err),
        };
        let r = self.reqs[ri as usize].as_mut().expect("live request");
        r.pending = u32::MAX; // poison: a dead request
        self.responses.push_back(response);
        self.reqs_free.push(ri);
        self.reqs_live -= 1;
    }

    fn fail(&mut self, ri: u32, e: IoError) {
        self.stats.io_errors += 1;
        let r = self.req_mut(ri);
        r.failed.get_or_insert(e);
    }

    // ----- slots ----------------------------------------------------------

    fn has_room_for(&self, ri: u32) -> bool {
        let r = self.req(ri);
        if self.config.write_policy == WritePolicy::WriteAround && !self.around_busy(ri) {
            return true;
        }
        let need = self.pages_of(r.offset_bytes, r.len_bytes);
        if self.slots.free_count() + self.slots.evictable() < need {
            return false;
        }
        // Write-through: two backing writes of one page must not race, so a
        // write waits while an earlier one to its pages is in flight.
        self.config.write_policy == WritePolicy::WriteBack || !self.overlaps_inflight(ri)
    }

    /// True while an older version of `key`'s page is being destaged.
    fn older_version_destaging(&self, key: PageKey) -> bool {
        self.old_versions
            .get(&key.0)
            .is_some_and(|q| q.iter().any(|&s| self.slots.has(s, FLAG_DESTAGING)))
    }

    /// A write-around over pages with a newer or in-flight version in the
    /// cache cannot bypass them without losing them: it goes through the cache.
    fn around_busy(&self, ri: u32) -> bool {
        let r = self.req(ri);
        self.geometry.pieces(r.offset_bytes, r.len_bytes).any(|p| {
            let key = PageKey::new(r.volume, p.page);
            self.older_version_destaging(key)
                || self
                    .slots
                    .lookup(key)
                    .is_some_and(|s| self.slots.state(s) != SlotState::Clean)
        })
    }

    fn overlaps_inflight(&self, ri: u32) -> bool {
        let r = self.req(ri);
        self.geometry.pieces(r.offset_bytes, r.len_bytes).any(|p| {
            self.slots
                .lookup(PageKey::new(r.volume, p.page))
                .is_some_and(|s| self.slots.state(s) == SlotState::Filling)
        })
    }

    /// A slot for a new version of `key`: a free one, else an evicted clean one.
    /// Callers have checked that one exists.
    fn alloc_slot(&mut self, key: PageKey) -> SlotIndex {
        if let Some(s) = self.slots.pop_free() {
            return s;
        }
        loop {
            let victim = self
                .replacement
                .evict_for(key)
                .expect("admission counted an evictable slot");
            debug_assert_eq!(self.slots.state(victim), SlotState::Clean);
            self.stats.evictions += 1;
            self.slots.unmap(victim);
            if self.slots.pins(victim) > 0 {
                // Someone still reads it: it leaves the cache and is freed later.
                self.slots.set_state(victim, SlotState::Stale);
                continue;
            }
            self.slots.set_state(victim, SlotState::Free);
            return victim;
        }
    }

    fn release_slot_if_free(&mut self, slot: SlotIndex) {
        if self.slots.freeable(slot) {
            self.free_slot(slot);
        }
    }

    fn unpin(&mut self, slot: SlotIndex) {
        if self.slots.unpin(slot) {
            self.free_slot(slot);
        }
    }

    /// A stale slot nothing uses any more: back to the pool, or (persistent
    /// caches) first through a `FreeSlots` command, in version order among
    /// its page's old versions.
    fn free_slot(&mut self, slot: SlotIndex) {
        debug_assert!(self.slots.freeable(slot));
        if !self.config.persistent {
            self.slots.push_free(slot);
            return;
        }
        self.slots.set_flag(slot, FLAG_FREEING, true);
        if self.slots.has(slot, FLAG_OLD) {
            self.send_oldest_free(self.slots.key(slot).0);
        } else {
            self.slots.set_flag(slot, FLAG_FREE_SENT, true);
            self.to_free.push(slot);
        }
    }

    /// Issue the free of a page's oldest old version, once it is freeable and
    /// not already sent.
    fn send_oldest_free(&mut self, key: u64) {
        let Some(&front) = self.old_versions.get(&key).and_then(|q| q.front()) else {
            return;
        };
        if self.slots.has(front, FLAG_FREEING) && !self.slots.has(front, FLAG_FREE_SENT) {
            self.slots.set_flag(front, FLAG_FREE_SENT, true);
            self.to_free.push(front);
        }
    }

    /// Emit the gathered frees as one command once there are enough of them,
    /// once the oldest has waited `FREE_DELAY_NS`, or at once when room or a
    /// drain waits for them (`now` = `Nanos::MAX` forces it). Freeing later is
    /// always safe: a slot only stays out of the pool longer.
    fn emit_frees(&mut self, now: Nanos) {
        if self.to_free.is_empty() {
            self.frees_due = None;
            return;
        }
        let due = *self
            .frees_due
            .get_or_insert(Nanos(now.0.saturating_add(FREE_DELAY_NS)));
        let urgent = self.to_free.len() >= FREE_BATCH_SLOTS
            || now >= due
            || !self.stalled.is_empty()
            || self.draining;
        if !urgent {
            return;
        }
        self.frees_due = None;
        let slots = std::mem::take(&mut self.to_free);
        let io = self.new_io(IoCtx::FreeSlots {
            slots: slots.clone(),
        });
        self.commands.push_back(IoCommand::FreeSlots { io, slots });
    }

    /// Append `slot` to its page's old versions (it is the newest of them).
    fn push_old(&mut self, slot: SlotIndex) {
        self.slots.set_flag(slot, FLAG_OLD, true);
        self.old_versions
            .entry(self.slots.key(slot).0)
            .or_default()
            .push_back(slot);
    }

    /// Take `slot` out of its page's old versions, if it is there.
    fn remove_old(&mut self, slot: SlotIndex) {
        if !self.slots.has(slot, FLAG_OLD) {
            return;
        }
        self.slots.set_flag(slot, FLAG_OLD, false);
        let key = self.slots.key(slot).0;
        let queue = self
            .old_versions
            .get_mut(&key)
            .expect("old version was queued");
        queue.retain(|&s| s != slot);
        if queue.is_empty() {
            self.old_versions.remove(&key);
        }
    }

    /// Make the current version of a page not current any more.
    fn retire(&mut self, slot: SlotIndex) {
        self.retire_version(slot);
        self.slots.unmap(slot);
    }

    /// Retire `old` in favour of a new version in `new` (an overwrite).
    fn supersede(&mut self, old: SlotIndex, new: SlotIndex) {
        self.retire_version(old);
        self.slots.remap(old, new);
    }

    /// What retiring a version means, apart from the directory entry.
    fn retire_version(&mut self, slot: SlotIndex) {
        if self.slots.state(slot) == SlotState::Clean {
            self.replacement.remove(slot);
        }
        if self.config.persistent || self.slots.has(slot, FLAG_DESTAGING) {
            self.push_old(slot);
        }
        self.slots.set_state(slot, SlotState::Stale);
    }

    fn defer(&mut self, on: SlotIndex, d: Deferred) {
        self.deferred.entry(on.0).or_default().push_back(d);
    }

    /// Run the pieces that waited for `slot` to be written, in arrival order.
    fn release_waiters(&mut self, slot: SlotIndex) {
        if self.deferred.is_empty() {
            return;
        }
        let Some(mut waiters) = self.deferred.remove(&slot.0) else {
            return;
        };
        while let Some(d) = waiters.pop_front() {
            match d {
                Deferred::Write {
                    req,
                    piece,
                    through,
                } => {
                    self.req_mut(req).pending -= 1;
                    self.issue_write_piece(req, piece, through);
                }
                Deferred::Read { req, piece } => {
                    self.req_mut(req).pending -= 1;
                    self.issue_read_piece(req, piece);
                }
            }
        }
    }

    // ----- I/O ids --------------------------------------------------------

    fn new_io(&mut self, ctx: IoCtx) -> IoId {
        let idx = match self.ios_free.pop() {
            Some(i) => i,
            None => {
                self.ios.push(None);
                self.io_gens.push(0);
                (self.ios.len() - 1) as u32
            }
        };
        self.ios[idx as usize] = Some(ctx);
        IoId(((self.io_gens[idx as usize] as u64) << 32) | idx as u64)
    }

    fn take_io(&mut self, io: IoId) -> Option<IoCtx> {
        let idx = (io.0 & 0xffff_ffff) as usize;
        let gen = (io.0 >> 32) as u32;
        if self.io_gens.get(idx) != Some(&gen) {
            return None;
        }
        let ctx = self.ios[idx].take()?;
        self.io_gens[idx] = gen.wrapping_add(1);
        self.ios_free.push(idx as u32);
        Some(ctx)
    }

    // ----- reads ----------------------------------------------------------

    fn admit_read(&mut self, ri: u32) {
        self.stats.reads += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let mut all_hit = true;
        // A run of consecutive missing pieces: (offset_bytes, len_bytes, req_offset_bytes).
        let mut run: Option<(u64, u64, u64)> = None;
        for piece in self.geometry.pieces(off, len) {
            self.stats.read_pages += 1;
            let key = PageKey::new(vol, piece.page);
            if self.slots.lookup(key).is_some() {
                self.stats.read_page_hits += 1;
                if let Some(run) = run.take() {
                    self.issue_backing_read(ri, run);
                }
                self.issue_read_piece(ri, piece);
            } else {
                all_hit = false;
                let piece_off =
                    self.geometry.page_offset_bytes(piece.page) + piece.page_offset_bytes as u64;
                run = Some(match run {
                    Some((o, l, q)) => (o, l + piece.len_bytes as u64, q),
                    None => (piece_off, piece.len_bytes as u64, piece.req_offset_bytes),
                });
            }
        }
        if let Some(run) = run {
            self.issue_backing_read(ri, run);
        }
        if all_hit {
            self.stats.read_hits += 1;
        }
    }

    /// One piece of a read: from its cached page, or the backing if not cached.
    fn issue_read_piece(&mut self, ri: u32, piece: PagePiece) {
        let r = self.req(ri);
        let (vol, id) = (r.volume, r.id);
        let key = PageKey::new(vol, piece.page);
        match self.slots.lookup(key) {
            Some(slot) if self.slots.state(slot) == SlotState::Filling => {
                self.req_mut(ri).pending += 1;
                self.defer(slot, Deferred::Read { req: ri, piece });
            }
            Some(slot) => {
                if self.slots.state(slot) == SlotState::Clean {
                    self.replacement.hit(slot);
                }
                self.slots.pin(slot);
                self.req_mut(ri).pending += 1;
                let io = self.new_io(IoCtx::ReadSlot { req: ri, slot });
                self.commands.push_back(IoCommand::ReadPage {
                    io,
                    slot,
                    page_offset_bytes: piece.page_offset_bytes,
                    len_bytes: piece.len_bytes,
                    req: id,
                    req_offset_bytes: piece.req_offset_bytes,
                });
            }
            None => {
                let off =
                    self.geometry.page_offset_bytes(piece.page) + piece.page_offset_bytes as u64;
                self.issue_backing_read(ri, (off, piece.len_bytes as u64, piece.req_offset_bytes));
            }
        }
    }

    fn issue_backing_read(
        &mut self,
        ri: u32,
        (offset_bytes, len_bytes, req_offset_bytes): (u64, u64, u64),
    ) {
        let r = self.req(ri);
        let (volume, id) = (r.volume, r.id);
        self.req_mut(ri).pending += 1;
        let io = self.new_io(IoCtx::ReadBacking {
            req: ri,
            volume,
            offset_bytes,
            len_bytes,
            req_offset_bytes,
            write_seq: self.write_seq,
        });
        self.commands.push_back(IoCommand::ReadBacking {
            io,
            volume,
            offset_bytes,
            len_bytes,
            req: id,
            req_offset_bytes,
        });
    }

    fn write_bucket(key: PageKey) -> usize {
        (key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize % WRITE_FILTER_BUCKETS
    }

    /// After a read miss: insert the whole pages it read, unless a write to
    /// them may have been admitted since (the data could be older than it).
    fn insert_read_pages(
        &mut self,
        ri: u32,
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
        req_offset_bytes: u64,
        write_seq: u64,
    ) {
        let ps = self.geometry.page_size_bytes() as u64;
        let first = offset_bytes.div_ceil(ps);
        let end = (offset_bytes + len_bytes) / ps;
        let id = self.req(ri).id;
        for page in first..end {
            if !self.stalled.is_empty() || self.slots.free_count() + self.slots.evictable() == 0 {
                return; // never take room from writes
            }
            let key = PageKey::new(volume, PageIndex(page));
            let bucket = Self::write_bucket(key);
            if self.slots.lookup(key).is_some()
                || self.write_filter[bucket] > write_seq
                || self.backing_writes_in_flight[bucket] > 0
            {
                continue;
            }
            let slot = self.alloc_slot(key);
            self.slots.set_state(slot, SlotState::Filling);
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, true);
            self.slots.map(slot, key);
            self.stats.read_inserts += 1;
            self.req_mut(ri).pending += 1;
            let io = self.new_io(IoCtx::InsertFill { req: ri, slot });
            let src = Source::Request {
                req: id,
                offset_bytes: req_offset_bytes + page * ps - offset_bytes,
            };
            let record = self.record(key, false);
            self.commands.push_back(IoCommand::WritePage {
                io,
                slot,
                base: PageBase::None,
                patch: Patch {
                    page_offset_bytes: 0,
                    len_bytes: ps as u32,
                    src,
                },
                record,
            });
        }
    }

    // ----- writes ---------------------------------------------------------

    fn admit_write(&mut self, ri: u32) {
        self.stats.writes += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let mut through = self.config.write_policy == WritePolicy::WriteThrough;
        if self.config.write_policy == WritePolicy::WriteAround {
            if !self.around_busy(ri) {
                return self.admit_write_around(ri);
            }
            through = true;
        }
        // Take the slots now, so deferred pieces never wait for room.
        for piece in self.geometry.pieces(off, len) {
            let slot = self.alloc_slot(PageKey::new(vol, piece.page));
            self.req_mut(ri).reserved.push(slot);
        }
        let first_page = self.geometry.page_of(off);
        let sequential_start =
            first_page.0 > 0 && self.page_dirty(PageKey::new(vol, PageIndex(first_page.0 - 1)));
        let mut pieces = self.geometry.pieces(off, len).peekable();
        let mut first_group = true;
        while let Some(&first) = pieces.peek() {
            let (gnum, _) = self.geometry.group_of(first.page);
            let gkey = PageKey::new(vol, PageIndex(gnum)).0;
            let sequential = sequential_start || !first_group;
            first_group = false;
            let was_candidate = self.dirty.group_has(self.slots.keys(), gkey, E_CANDIDATE);
            let mut page_hit = false;
            while let Some(&piece) = pieces.peek() {
                if self.geometry.group_of(piece.page).0 != gnum {
                    break;
                }
                pieces.next();
                self.stats.write_pages += 1;
                self.write_seq += 1;
                let key = PageKey::new(vol, piece.page);
                self.write_filter[Self::write_bucket(key)] = self.write_seq;
                if self.page_dirty(key) {
                    self.stats.write_page_hits += 1;
                    if self
                        .slots
                        .lookup(key)
                        .is_some_and(|s| self.slots.has(s, FLAG_DESTAGING))
                    {
                        self.stats.write_page_hits_destaging += 1;
                    }
                    page_hit = true;
                }
                self.issue_write_piece(ri, piece, through);
            }
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_SEQUENTIAL, sequential);
            if was_candidate {
                self.stats.write_group_hits += 1;
                self.stats.write_group_hits_sequential += sequential as u64;
                let hit = GroupHit {
                    page_hit,
                    sequential,
                };
                self.order.hit(view!(self), gkey, hit);
            }
        }
        if through {
            self.issue_backing_write(ri);
        }
    }

    fn admit_write_around(&mut self, ri: u32) {
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        for piece in self.geometry.pieces(off, len) {
            self.stats.write_pages += 1;
            self.write_seq += 1;
            let key = PageKey::new(vol, piece.page);
            self.write_filter[Self::write_bucket(key)] = self.write_seq;
            if let Some(slot) = self.slots.lookup(key) {
                debug_assert_eq!(self.slots.state(slot), SlotState::Clean);
                self.retire(slot);
                self.release_slot_if_free(slot);
            }
        }
        self.issue_backing_write(ri);
    }

    fn issue_backing_write(&mut self, ri: u32) {
        let r = self.req(ri);
        let src = if r.kind == RequestKind::WriteZeroes {
            Source::Zero
        } else {
            Source::Request {
                req: r.id,
                offset_bytes: 0,
            }
        };
        let (volume, offset_bytes, len_bytes, fua) =
            (r.volume, r.offset_bytes, r.len_bytes, r.flags.fua);
        for piece in self.geometry.pieces(offset_bytes, len_bytes) {
            self.backing_writes_in_flight[Self::write_bucket(PageKey::new(volume, piece.page))] +=
                1;
        }
        self.req_mut(ri).pending += 1;
        let io = self.new_io(IoCtx::WriteBacking { req: ri });
        self.commands.push_back(IoCommand::WriteBacking {
            io,
            volume,
            offset_bytes,
            len_bytes,
            src,
            fua,
        });
    }

    /// The page's latest version is newer than the backing (it is in the
    /// dirty set): its current slot is dirty, or being filled to be dirty.
    fn page_dirty(&self, key: PageKey) -> bool {
        self.slots
            .lookup(key)
            .is_some_and(|s| match self.slots.state(s) {
                SlotState::Dirty => true,
                SlotState::Filling => !self.slots.has(s, FLAG_FILL_CLEAN),
                _ => false,
            })
    }

    /// Write one page version into a fresh slot (copy-on-write), or wait for
    /// the page's in-flight version first. The dirty bookkeeping happens here,
    /// when the version is issued, so a deferred piece sees the page as the
    /// earlier write left it (written, or reverted after an error).
    fn issue_write_piece(&mut self, ri: u32, piece: PagePiece, through: bool) {
        let r = self.req(ri);
        let (vol, id, kind) = (r.volume, r.id, r.kind);
        let key = PageKey::new(vol, piece.page);
        let cur = self.slots.lookup(key);
        if let Some(c) = cur {
            if self.slots.state(c) == SlotState::Filling {
                self.req_mut(ri).pending += 1;
                self.defer(
                    c,
                    Deferred::Write {
                        req: ri,
                        piece,
                        through,
                    },
                );
                return;
            }
        }
        // Write-through keeps a page clean unless it holds newer data than the
        // backing, or an older version of it is being destaged: that destage
        // could land after this write's backing write, so this version stays
        // dirty and is destaged after it (destages of a page go in order).
        let dirty_before = self.page_dirty(key);
        let through_clean = through && !dirty_before;
        let clean = through_clean && !self.older_version_destaging(key);
        let undo = Undo {
            made_dirty: !clean && !dirty_before,
            through_clean: through_clean && clean,
        };
        let slot = self
            .req_mut(ri)
            .reserved
            .pop()
            .expect("slot reserved at admission");
        let ps = self.geometry.page_size_bytes();
        let base = if piece.is_whole_page(ps) {
            PageBase::None
        } else if let Some(c) = cur {
            PageBase::Slot(c)
        } else {
            PageBase::Backing {
                volume: vol,
                page: piece.page,
            }
        };
        let old = cur.map(|c| {
            let state = self.slots.state(c);
            self.slots.pin(c);
            self.supersede(c, slot);
            (c, state)
        });
        if old.is_none() {
            self.slots.map(slot, key);
        }
        self.slots.set_state(slot, SlotState::Filling);
        self.slots.set_flag(slot, FLAG_FILL_CLEAN, clean);
        if !clean {
            // The new version is the page's entry in the dirty set. It is not
            // being destaged, so a group that is a candidate stays one.
            let flags = if dirty_before {
                self.dirty.replace(self.slots.keys(), key.0, slot.0)
            } else {
                self.dirty.insert(self.slots.keys(), slot.0)
            };
            if flags & E_CANDIDATE == 0 {
                self.group_changed(self.dirty.group_of(key.0));
            }
        }
        let src = if kind == RequestKind::WriteZeroes {
            Source::Zero
        } else {
            Source::Request {
                req: id,
                offset_bytes: piece.req_offset_bytes,
            }
        };
        self.req_mut(ri).pending += 1;
        if self.config.write_policy != WritePolicy::WriteBack {
            self.req_mut(ri).finalize.push(slot);
        }
        let io = self.new_io(IoCtx::Fill {
            req: ri,
            slot,
            old,
            undo,
        });
        // Write-through versions are recorded dirty too: the backing may miss
        // the write if the host crashes before it completes.
        let record = self.record(key, true);
        self.commands.push_back(IoCommand::WritePage {
            io,
            slot,
            base,
            patch: Patch {
                page_offset_bytes: piece.page_offset_bytes,
                len_bytes: piece.len_bytes,
                src,
            },
            record,
        });
    }

    /// The record of a new page version, with the next version number.
    fn record(&mut self, key: PageKey, dirty: bool) -> SlotRecord {
        let seq = self.next_seq;
        self.next_seq += 1;
        SlotRecord { key, seq, dirty }
    }

    /// Write-back: a page write completed; the slot is now the page's version.
    fn finish_fill(&mut self, slot: SlotIndex) {
        debug_assert_eq!(self.slots.state(slot), SlotState::Filling);
        if self.slots.has(slot, FLAG_FILL_CLEAN) {
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            self.slots.set_state(slot, SlotState::Clean);
            self.replacement.insert(slot, self.slots.key(slot));
        } else {
            self.slots.set_state(slot, SlotState::Dirty);
        }
        self.release_waiters(slot);
    }

    /// Write-through: the request is done; its page versions become final.
    /// If the backing write failed, a clean-intent version becomes dirty so it
    /// is destaged later rather than lost.
    fn finalize_through(&mut self, slot: SlotIndex, backing_ok: bool) {
        if self.slots.state(slot) != SlotState::Filling {
            return;
        }
        if !backing_ok && self.slots.has(slot, FLAG_FILL_CLEAN) {
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            let key = self.slots.key(slot);
            self.mark_dirty(key);
        }
        if self.config.persistent && self.slots.has(slot, FLAG_FILL_CLEAN) {
            // Its record says dirty (see `record`): a persistent cache keeps no
            // clean copy under a dirty record; the version leaves through FreeSlots.
            self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
            self.retire(slot);
            self.release_slot_if_free(slot);
            self.release_waiters(slot);
            return;
        }
        self.finish_fill(slot);
    }

    /// Bookkeeping for a page that becomes dirty outside admission.
    /// Its current slot must be the dirty version and not yet in the set.
    fn mark_dirty(&mut self, key: PageKey) {
        let slot = self.slots.lookup(key).expect("dirty page has a slot");
        if self.dirty.insert(self.slots.keys(), slot.0) & E_CANDIDATE == 0 {
            self.group_changed(self.dirty.group_of(key.0));
        }
    }

    /// Undo an admitted write's page version after its write failed.
    fn revert_fill(&mut self, slot: SlotIndex, old: Option<(SlotIndex, SlotState)>, undo: Undo) {
        let key = self.slots.key(slot);
        // A version meant dirty is the page's entry in the dirty set.
        let in_dirty_set = !self.slots.has(slot, FLAG_FILL_CLEAN);
        self.slots.unmap(slot);
        self.slots.set_state(slot, SlotState::Stale);
        self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
        let restored = old.filter(|_| !undo.through_clean);
        if let Some((o, state)) = restored {
            // The previous version becomes current again.
            self.remove_old(o);
            self.slots.map(o, key);
            self.slots.set_state(
                o,
                if state == SlotState::Clean {
                    SlotState::Clean
                } else {
                    SlotState::Dirty
                },
            );
            if state == SlotState::Clean {
                self.replacement.insert(o, key);
            }
        }
        if in_dirty_set {
            if undo.made_dirty {
                self.remove_dirty(key);
            } else {
                // The page was dirty before: its previous version is again.
                let (o, _) = restored.expect("a dirty page's previous version");
                self.dirty.replace(self.slots.keys(), key.0, o.0);
            }
            self.group_changed(self.dirty.group_of(key.0));
        }
        self.release_slot_if_free(slot);
        self.release_waiters(slot);
    }

    // ----- trim -----------------------------------------------------------

    fn admit_trim(&mut self, ri: u32) {
        self.stats.trims += 1;
        let r = self.req(ri);
        let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
        let ps = self.geometry.page_size_bytes();
        let pieces: Vec<PagePiece> = self
            .geometry
            .pieces(off, len)
            .filter(|p| p.is_whole_page(ps))
            .collect();
        for piece in pieces {
            let key = PageKey::new(vol, piece.page);
            let Some(slot) = self.slots.lookup(key) else {
                continue;
            };
            match self.slots.state(slot) {
                SlotState::Filling => continue, // advisory: leave in-flight versions alone
                SlotState::Dirty => {
                    self.remove_dirty(key);
                    self.retire(slot);
                    self.group_changed(self.dirty.group_of(key.0));
                }
                _ => self.retire(slot),
            }
            self.release_slot_if_free(slot);
        }
    }

    // ----- groups and destage ---------------------------------------------

    /// Take a page out of the dirty set (before its slot can be reused). If
    /// that empties a candidate group, the group leaves the candidates.
    fn remove_dirty(&mut self, key: PageKey) {
        let flags = self.dirty.remove(self.slots.keys(), key.0);
        let gkey = self.dirty.group_of(key.0);
        if flags & E_CANDIDATE != 0 && self.dirty.group_flags(self.slots.keys(), gkey).is_none() {
            self.candidates -= 1;
            self.order.remove(view!(self), gkey);
        }
    }

    /// Keep the candidate set in step with a group: a candidate is a group
    /// with a dirty page whose latest version is not being destaged.
    fn group_changed(&mut self, gkey: u64) {
        let Some(flags) = self.dirty.group_flags(self.slots.keys(), gkey) else {
            return;
        };
        let candidate = flags & E_CANDIDATE != 0;
        let slots = &self.slots;
        let undestaged = self.dirty.any_in_group(slots.keys(), gkey, |s| {
            !slots.has(SlotIndex(s), FLAG_DESTAGING)
        });
        if undestaged && !candidate {
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_CANDIDATE, true);
            self.candidates += 1;
            self.order.insert(view!(self), gkey);
        } else if !undestaged && candidate {
            self.dirty
                .set_group_flags(self.slots.keys(), gkey, E_CANDIDATE, false);
            self.candidates -= 1;
            self.order.remove(view!(self), gkey);
        }
    }

    fn start_destages(&mut self) {
        if self.destage_paused_until.is_some() {
            return;
        }
        let mut fruitless = 0usize;
        loop {
            // The trickle needs both the last and the next destage sequential:
            // look under the pointer only when the first holds.
            let next_sequential = self.last_destage_sequential && {
                let under = self.order.peek(&*view!(self));
                under.is_some_and(|g| self.dirty.group_has(self.slots.keys(), g, E_SEQUENTIAL))
            };
            let input = RateInput {
                occupancy_pages: self.dirty.pages() as u64,
                capacity_pages: self.capacity_pages(),
                last_destage_sequential: self.last_destage_sequential,
                next_candidate_sequential: next_sequential,
            };
            let mut target = self.rate.target_outstanding(&input);
            if self.draining || !self.stalled.is_empty() {
                // Writes wait for room: destage at full rate whatever the thresholds say.
                target = self.config.rate.destages_max;
            }
            if self.destages_in_flight >= target || fruitless > self.candidates {
                return;
            }
            let Some(gkey) = self.order.pick(view!(self)) else {
                return;
            };
            let keys = self.slots.keys();
            self.dirty.set_group_flags(keys, gkey, E_CANDIDATE, false);
            self.candidates -= 1;
            self.stats.destage_picks += 1;
            self.last_destage_sequential = self.dirty.group_has(keys, gkey, E_SEQUENTIAL);
            if self.issue_group_destages(gkey) == 0 {
                fruitless += 1;
            }
            self.group_changed(gkey);
        }
    }

    /// Destage every dirty, written page of group `gkey` as contiguous runs.
    /// Returns the number of destage requests issued.
    fn issue_group_destages(&mut self, gkey: u64) -> u32 {
        let mut group = std::mem::take(&mut self.positions);
        self.dirty.group_slots(self.slots.keys(), gkey, &mut group);
        let vol = PageKey(gkey).volume();
        let mut issued = 0;
        let mut run: Vec<SlotIndex> = Vec::new();
        let mut run_start = 0u64;
        for &s in &group {
            let slot = SlotIndex(s);
            let key = self.slots.key(slot);
            let page = key.page().0;
            let ready = self.slots.state(slot) == SlotState::Dirty
                && !self.slots.has(slot, FLAG_DESTAGING)
                && (self.old_versions.is_empty() || !self.old_versions.contains_key(&key.0));
            let breaks_run = !ready || run_start + run.len() as u64 != page;
            if breaks_run && !run.is_empty() {
                self.issue_destage(vol, PageIndex(run_start), std::mem::take(&mut run));
                issued += 1;
            }
            if ready {
                if run.is_empty() {
                    run_start = page;
                }
                self.slots.set_flag(slot, FLAG_DESTAGING, true);
                run.push(slot);
            }
        }
        if !run.is_empty() {
            self.issue_destage(vol, PageIndex(run_start), run);
            issued += 1;
        }
        self.positions = group;
        issued
    }

    fn issue_destage(&mut self, volume: VolumeId, first_page: PageIndex, slots: Vec<SlotIndex>) {
        self.stats.destages += 1;
        self.stats.destaged_pages += slots.len() as u64;
        let sector = self.geometry.page_offset_bytes(first_page) / 512;
        if let Some(last) = self.last_destage_sector {
            self.stats.destage_distance_sectors_sum += last.abs_diff(sector) as u128;
            self.stats.destage_distance_pairs += 1;
        }
        self.last_destage_sector = Some(sector);
        self.destages_in_flight += 1;
        let io = self.new_io(IoCtx::Destage {
            slots: slots.clone(),
        });
        self.commands.push_back(IoCommand::Destage {
            io,
            volume,
            first_page,
            slots,
        });
    }

    fn finish_destage(&mut self, now: Nanos, slots: Vec<SlotIndex>, result: Result<(), IoError>) {
        self.destages_in_flight -= 1;
        // A destage request is a run within one group: its candidacy is
        // settled once, after every page of the run.
        let gkey = self.dirty.group_of(self.slots.key(slots[0]).0);
        let mut any_dirty = false;
        for &slot in &slots {
            debug_assert!(self.slots.has(slot, FLAG_DESTAGING));
            self.slots.set_flag(slot, FLAG_DESTAGING, false);
            match self.slots.state(slot) {
                SlotState::Dirty => {
                    any_dirty = true;
                    let key = self.slots.key(slot);
                    debug_assert_eq!(self.dirty.group_of(key.0), gkey);
                    if result.is_ok() {
                        self.remove_dirty(key);
                        // A persistent cache keeps no clean copy under a dirty
                        // record: evicting it later would reuse the slot while
                        // recovery could still find the old page there.
                        if self.config.keep_clean && !self.config.persistent {
                            self.slots.set_state(slot, SlotState::Clean);
                            self.replacement.insert(slot, key);
                        } else {
                            // Counted as an old version until its record is freed.
                            self.retire(slot);
                            self.release_slot_if_free(slot);
                        }
                    }
                }
                SlotState::Stale => {
                    // Persistent caches count the old version until its free record is durable.
                    if !self.config.persistent {
                        self.remove_old(slot);
                    }
                    self.release_slot_if_free(slot);
                }
                other => debug_assert!(false, "destaged slot in state {other:?}"),
            }
        }
        if any_dirty {
            self.group_changed(gkey);
        }
        self.rate
            .destage_done(self.dirty.pages() as u64, self.capacity_pages());
        match result {
            Ok(()) => self.destage_retry_ns = DESTAGE_RETRY_NS_MIN,
            Err(_) => {
                self.stats.destage_errors += 1;
                self.destage_paused_until = Some(Nanos(now.0 + self.destage_retry_ns));
                self.destage_retry_ns = (self.destage_retry_ns * 2).min(DESTAGE_RETRY_NS_MAX);
            }
        }
    }

    // ----- completions ----------------------------------------------------

    pub fn handle_completion(
        &mut self,
        now: Nanos,
        io: IoId,
        result: Result<(), IoError>,
    ) -> Result<(), EngineError> {
        let ctx = self.take_io(io).ok_or(EngineError::UnknownIo(io))?;
        let mut done_req = None;
        match ctx {
            IoCtx::Fill {
                req,
                slot,
                old,
                undo,
            } => {
                if let Some((o, _)) = old {
                    if result.is_ok() {
                        self.unpin(o);
                    }
                }
                match result {
                    Ok(()) => {
                        if self.config.write_policy == WritePolicy::WriteBack {
                            self.finish_fill(slot);
                        }
                    }
                    Err(e) => {
                        self.fail(req, e);
                        self.req_mut(req).finalize.retain(|&s| s != slot);
                        self.revert_fill(slot, old, undo);
                        if let Some((o, _)) = old {
                            self.unpin(o);
                        }
                        // A write-through version that never reached the
                        // cache leaves no record, but its backing write may
                        // land; an older version whose dirty record is not
                        // zeroed yet would come back over it after a crash.
                        // The failed request is answered only once the
                        // newest such record is zeroed (frees go oldest first).
                        if self.config.persistent && undo.through_clean {
                            let key = self.slots.key(slot).0;
                            if let Some(&newest) =
                                self.old_versions.get(&key).and_then(|q| q.back())
                            {
                                self.req_mut(req).pending += 1;
                                self.free_waiters.entry(newest.0).or_default().push(req);
                            }
                        }
                    }
                }
                done_req = Some(req);
            }
            IoCtx::InsertFill { req, slot } => {
                match result {
                    Ok(()) => self.finish_fill(slot),
                    Err(_) => {
                        self.slots.unmap(slot);
                        self.slots.set_state(slot, SlotState::Stale);
                        self.slots.set_flag(slot, FLAG_FILL_CLEAN, false);
                        self.release_slot_if_free(slot);
                        self.release_waiters(slot);
                    }
                }
                done_req = Some(req);
            }
            IoCtx::ReadSlot { req, slot } => {
                self.unpin(slot);
                if let Err(e) = result {
                    self.fail(req, e);
                }
                done_req = Some(req);
            }
            IoCtx::ReadBacking {
                req,
                volume,
                offset_bytes,
                len_bytes,
                req_offset_bytes,
                write_seq,
            } => {
                match result {
                    Ok(()) if self.config.read_insert => self.insert_read_pages(
                        req,
                        volume,
                        offset_bytes,
                        len_bytes,
                        req_offset_bytes,
                        write_seq,
                    ),
                    Ok(()) => {}
                    Err(e) => self.fail(req, e),
                }
                done_req = Some(req);
            }
            IoCtx::WriteBacking { req } => {
                // A read miss issued while this write was in flight may have
                // read the old bytes: it must not insert them.
                let r = self.req(req);
                let (vol, off, len) = (r.volume, r.offset_bytes, r.len_bytes);
                for piece in self.geometry.pieces(off, len) {
                    self.write_seq += 1;
                    let bucket = Self::write_bucket(PageKey::new(vol, piece.page));
                    self.write_filter[bucket] = self.write_seq;
                    self.backing_writes_in_flight[bucket] -= 1;
                }
                if let Err(e) = result {
                    self.fail(req, e);
                }
                done_req = Some(req);
            }
            IoCtx::Destage { slots } => self.finish_destage(now, slots, result),
            IoCtx::FreeSlots { slots } => match result {
                Ok(()) => {
                    // Only failed write-through requests ever wait here.
                    let waiting = !self.free_waiters.is_empty();
                    for &slot in slots.iter().filter(|_| waiting) {
                        if let Some(reqs) = self.free_waiters.remove(&slot.0) {
                            for ri in reqs {
                                self.req_mut(ri).pending -= 1;
                                self.maybe_finish(ri);
                            }
                        }
                    }
                    for slot in slots {
                        self.slots.set_flag(slot, FLAG_FREEING, false);
                        self.slots.set_flag(slot, FLAG_FREE_SENT, false);
                        let key = self.slots.key(slot).0;
                        let was_old = self.slots.has(slot, FLAG_OLD);
                        self.remove_old(slot);
                        self.slots.push_free(slot);
                        if was_old {
                            self.send_oldest_free(key);
                        }
                    }
                }
                Err(_) => {
                    // Try again with the next batch; the slots stay out of the pool.
                    self.stats.io_errors += 1;
                    self.to_free.extend(slots);
                }
            },
        }
        if let Some(ri) = done_req {
            self.req_mut(ri).pending -= 1;
            self.maybe_finish(ri);
        }
        self.drain_stalls(now);
        self.start_destages();
        self.emit_frees(now);
        Ok(())
    }

    /// Admit stalled writes, oldest first, while room allows.
    fn drain_stalls(&mut self, now: Nanos) {
        while let Some(&ri) = self.stalled.front() {
            if !self.has_room_for(ri) {
                return;
            }
            self.stalled.pop_front();
            let r = self.req_mut(ri);
            let since = r
                .stalled_at
                .take()
                .expect("stalled request has a stall time");
            self.stats.stall_ns_total += now.saturating_sub(since).0;
            self.admit_write(ri);
            self.maybe_finish(ri);
        }
    }
}

/// The candidate groups as the destage order sees them: the groups of the
/// dirty set flagged `E_CANDIDATE`, with the recency bit `E_RECENT`.
/// (`view!(self)` builds one from the engine's fields, so the order itself
/// can be borrowed beside it.)
struct GroupView<'a> {
    dirty: &'a mut DirtySet,
    keys: &'a [u64],
    candidates: usize,
    /// Counts recency bits cleared, i.e. groups the pointer skipped.
    skips: &'a mut u64,
}

impl Candidates for GroupView<'_> {
    fn len(&self) -> usize {
        self.candidates
    }
    fn next(&self, after: Option<u64>) -> Option<u64> {
        self.dirty.next_group(self.keys, after, E_CANDIDATE)
    }
    fn recent(&self, key: u64) -> bool {
        self.dirty.group_has(self.keys, key, E_RECENT)
    }
    fn set_recent(&mut self, key: u64, on: bool) {
        let before = self.dirty.set_group_flags(self.keys, key, E_RECENT, on);
        if !on && before & E_RECENT != 0 {
            *self.skips += 1;
        }
    }
}
