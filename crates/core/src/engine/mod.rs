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

mod bypassed;
mod destager;
mod dirty;
mod free;
mod free_queue;
mod io_table;
mod page_counts;
mod request_table;
mod slots;
mod stats;
mod timers;
mod write_filter;
mod write_path;

pub use change::{ChangeError, Retuned};
pub use criticality::{CriticalityError, ISSUERS_MAX, ISSUER_UNTAGGED};
pub use log::{log_write_pages_max, LogPosition};
pub use stats::{Stats, VolumeCounts};

use crate::command::*;
use crate::config::{ConfigError, EngineConfig};
use crate::geometry::{Geometry, PagePiece};
use crate::metrics::{MetricKind, MetricsVisitor};
use crate::policy::admission::{build_admission, Admission, Admit, WriteInfo};
use crate::policy::destage_order::{Candidates, DestageOrder, GroupHit, GroupKey, DESTAGE_ORDERS};
use crate::policy::destage_rate::{DestageRate, RateInput, DESTAGE_RATES};
use crate::policy::replacement::{Replacement, REPLACEMENTS};
use crate::policy::write_policy::{FlushAction, WriteAround, WritePolicy, WriteRoute};
use crate::time::Nanos;
use crate::types::*;
use destager::Destager;
use dirty::{DirtySet, E_CANDIDATE, E_RECENT, E_SEQUENTIAL};
use journal::Journal;
use ordered::Ordered;
use rustc_hash::FxHashMap as HashMap;
use slots::{
    SlotState, Slots, FLAG_DESTAGING, FLAG_FILL_CLEAN, FLAG_FREEING, FLAG_FREE_SENT, FLAG_OLD,
};
use staleness::Ages;
use std::collections::VecDeque;
use thiserror::Error;
use timers::{Timer, Timers};
use write_path::{BackingKind, WritePath};

/// The destage order's view of the candidates, borrowed field by field.
macro_rules! view {
    ($engine:ident) => {
        &mut GroupView {
            dirty: &mut $engine.dirty,
            keys: $engine.slots.keys(),
            candidates: $engine.candidates,
            skips: &mut $engine.stats.destage_skips,
            draining: $engine.draining,
        }
    };
}

// After `view!`, which they use.
mod change;
mod completion;
mod criticality;
mod destage;
mod invariants;
mod journal;
mod log;
mod ordered;
mod promote;
mod read;
mod recovery;
mod report;
mod request;
mod staleness;
mod versions;
mod write;

/// Volumes per engine (the page key keeps 16 bits for the volume).
pub const VOLUMES_MAX: usize = 1 << 16;
/// Persistent caches free slot records in batches of this many...
const FREE_BATCH_SLOTS: usize = 32;
/// ...or at most this late, unless the driver asks otherwise
/// (`set_free_gathering`).
const FREE_DELAY_NS: u64 = 1_000_000;

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
    #[error("log position: a tail at slot {tail} and {log_slots} slots of log must fit the {slots} slots, with every version found inside the log")]
    LogOutOfRange {
        tail: u32,
        log_slots: u32,
        slots: u64,
    },
    #[error("log position: its batches cover {batch_slots} slots (each at least its header), not its {log_slots} slots of log")]
    LogBatches { log_slots: u32, batch_slots: u64 },
    #[error("log mode needs the log's position to recover (and only log mode takes one)")]
    LogPositionMissing,
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

/// A consistency point asked of a cache whose write policy has none.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("consistency points need write policy write-back-journaled; this cache runs {0}")]
pub struct NotJournaled(pub &'static str);

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
    /// The VOLUME admission policy admits its writes.
    critical: bool,
    /// Its own admission policy (`EngineConfig::volume_admissions`), in
    /// place of the engine's.
    admission: Option<Box<dyn Admission>>,
    counts: VolumeCounts,
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
    /// Which way a write goes (admission's bypass or the cache) and where
    /// its backing write stands (`write_path.rs`).
    path: WritePath,
    /// Ordered write-back: the write's issue number (`NO_NODE`: none).
    node: u64,
    /// Log mode: slots it holds in the pool and has not taken yet.
    log_budget: u32,
}

impl Req {
    /// Request `r` as admitted, nothing of it issued yet; `reserved` and
    /// `finalize` are empty vectors (kept from an earlier request).
    #[inline]
    fn admitted(r: Request, reserved: Vec<SlotIndex>, finalize: Vec<SlotIndex>) -> Req {
        debug_assert!(reserved.is_empty() && finalize.is_empty());
        Req {
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
            path: WritePath::Cached,
            node: NO_NODE,
            log_budget: 0,
        }
    }
}

/// `Req::node` of a request that is not an ordered write.
const NO_NODE: u64 = u64::MAX;

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

/// One page of a `FillRun`: its new version, the version it supersedes,
/// and what to undo if the write fails.
#[derive(Clone, Copy)]
struct FillPage {
    slot: SlotIndex,
    old: Option<(SlotIndex, SlotState)>,
    undo: Undo,
}

enum IoCtx {
    /// Log mode: whole pages of one write in consecutive slots (one
    /// `WritePages`), each completed as a `Fill` of its own would be.
    FillRun {
        req: u32,
        through: bool,
        fills: Vec<FillPage>,
    },
    Fill {
        req: u32,
        fill: FillPage,
        /// Written through: the version becomes final with its request.
        through: bool,
    },
    InsertFill {
        req: u32,
        slot: SlotIndex,
    },
    /// Log mode: a live dirty page copied from the log's tail to its head.
    CopyForward {
        slot: SlotIndex,
        old: Option<(SlotIndex, SlotState)>,
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
        /// A bypass (nothing of it in the cache), counted in `bypass_pages`.
        around: bool,
    },
    Destage {
        slots: Vec<SlotIndex>,
    },
    /// The backing write of a promoted bypass whose request was answered
    /// from the cache: its completion is discarded (`promote.rs`).
    PromotedOriginal {
        volume: VolumeId,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// A command of journaled write-back's checkpoint in flight (kept to
    /// send again if it fails).
    Checkpoint {
        cmd: IoCommand,
    },
    /// Log mode: a batch (`IoCommand::WriteBatch`) and its inner commands.
    Batch {
        seq: u64,
        header: SlotIndex,
        next_header: SlotIndex,
        ios: Vec<IoId>,
    },
    /// Log mode: the tail's move past `slots` slots.
    AdvanceLog {
        slots: u32,
    },
    /// Log mode: a checkpoint of the log's replay (`IoCommand::LogCheckpoint`).
    LogCheckpoint,
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
    admission: Box<dyn Admission>,
    /// Critical issuers (hinted, inherited) for the admission policies.
    issuers: criticality::Issuers,
    write_policy: Box<dyn WritePolicy>,
    order: Box<dyn DestageOrder>,
    rate: Box<dyn DestageRate>,
    replacement: Box<dyn Replacement>,

    /// Requests admitted and not answered, by index.
    reqs: request_table::RequestTable,
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
    old_versions: HashMap<u64, versions::OldQueue>,
    /// Stale slots waiting for a `FreeSlots` command (persistent caches).
    to_free: free_queue::FreeQueue,
    /// Failed write-through requests held until a slot's record is zeroed
    /// (see the `Fill` error path).
    free_waiters: HashMap<u32, Vec<u32>>,
    /// How long gathered frees may wait, and how many go out at once at
    /// the latest (`set_free_gathering`).
    free_delay_ns: u64,
    free_batch_slots: usize,
    /// Version number for the next page version (`SlotRecord::seq`).
    next_seq: u64,

    /// Commands in flight, by id: what each completion means.
    ios: io_table::IoTable,

    commands: VecDeque<IoCommand>,
    responses: VecDeque<Response>,

    /// Destages in flight, the last one's place, the pause after an error.
    destager: Destager,
    draining: bool,
    /// The recent writes a read miss's copy must not go behind.
    writes: write_filter::WriteFilter,
    /// Pages whose cached versions wait to be destaged until a backing
    /// write of them lands (a promoted bypass's original, or a write
    /// through the cache whose cache copy failed), with how many such
    /// writes are in flight: the two could land in either order, and an
    /// older version landing last would leave the backing behind the cache
    /// (`Engine::destage_held`).
    held_pages: page_counts::PageCounts,
    /// Of those, bypass writes, counted per page exactly: a write through
    /// the cache to one of their pages waits for them (its page base could
    /// be read from the backing before the bypass lands, and bring old
    /// bytes back over it). Exact, not by filter bucket: a false match made
    /// a critical write stall behind a bypass of other pages, and every
    /// write queued after it too (the rdc experiments, 2026-11-26).
    bypass_pages: page_counts::PageCounts,
    /// Writes admission bypassed with their backing write in flight, not
    /// promoted: bypasses and writes through the cache (no page lookup
    /// while there are none).
    bypassed: bypassed::BypassedWrites,
    positions: Vec<u32>,
    /// Deadlines: destage retry, batched frees.
    timers: Timers,
    /// When each dirty page became dirty, coarsely; expired groups.
    ages: Ages,
    /// Ordered write-back's dependency order (None under other policies).
    ordered: Option<Ordered>,
    /// Journaled write-back's transactions (None under other policies).
    journal: Option<Journal>,
    /// Log mode's ring, batches and tail (None unless `EngineConfig::log`).
    log: Option<log::Log>,
    last_request_at: Nanos,
    /// The cache went idle with dirty pages: destage at the idle rate.
    idle_draining: bool,
    /// A stop is in progress: no destage starts unless a write waits for
    /// room (`stop_destaging`).
    destaging_stopped: bool,
    /// Engine steps taken, for the rate of `check_invariants` on large caches.
    steps_checked: u64,
    stats: Stats,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Engine, ConfigError> {
        let geometry = config.validate()?;
        let slots = config.cache_slots as u32;
        let replacement = REPLACEMENTS.build(&config.replacement, slots as usize)?;
        let order = DESTAGE_ORDERS.build(&config.destage_order, ())?;
        let rate = DESTAGE_RATES.build(&config.destage_rate, config.rate)?;
        let admission = build_admission(&config.admission, config.sequential_cutoff_bytes)?;
        let write_policy = config.write_policy.build();
        let in_readiness_order = order.in_readiness_order();
        let ordered = write_policy
            .ordered()
            .then(|| Ordered::new(slots as usize, in_readiness_order));
        let journal = write_policy.journaled().then(|| Journal::new(&config));
        let requests_max = config.requests_max as usize;
        Ok(Engine {
            dirty: DirtySet::new(geometry.group_pages()),
            candidates: 0,
            slots: Slots::new(slots, requests_max * 4),
            geometry,
            volumes: Vec::new(),
            admission,
            issuers: criticality::Issuers::default(),
            write_policy,
            order,
            rate,
            replacement,
            reqs: request_table::RequestTable::with_capacity(requests_max),
            stalled: VecDeque::with_capacity(requests_max),
            deferred: HashMap::default(),
            old_versions: HashMap::default(),
            to_free: free_queue::FreeQueue::new(slots),
            free_waiters: HashMap::default(),
            free_delay_ns: FREE_DELAY_NS,
            free_batch_slots: FREE_BATCH_SLOTS,
            next_seq: 1,
            ios: io_table::IoTable::default(),
            commands: VecDeque::new(),
            responses: VecDeque::new(),
            destager: Destager::default(),
            draining: false,
            writes: write_filter::WriteFilter::default(),
            bypass_pages: page_counts::PageCounts::default(),
            bypassed: bypassed::BypassedWrites::default(),
            held_pages: page_counts::PageCounts::default(),
            positions: Vec::with_capacity(geometry.group_pages() as usize),
            timers: Timers::default(),
            ages: Ages::new(slots as usize, config.staleness.max_dirty_age_ns),
            ordered,
            journal,
            log: config
                .log
                .then(|| log::Log::new(slots, config.page_size_bytes)),
            last_request_at: Nanos::ZERO,
            idle_draining: false,
            destaging_stopped: false,
            steps_checked: 0,
            stats: Stats::default(),
            config,
        })
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
        let id = VolumeId(self.volumes.len() as u16);
        let critical = self.config.critical_volumes.contains(&id.0);
        let admission = self
            .config
            .volume_admissions
            .iter()
            .rev()
            .find(|(v, _)| *v == id.0);
        let admission = admission.map(|(_, name)| {
            build_admission(name, self.config.sequential_cutoff_bytes)
                .expect("names checked by EngineConfig::validate")
        });
        self.volumes.push(Volume {
            size_bytes,
            critical,
            admission,
            counts: VolumeCounts::default(),
        });
        Ok(id)
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
    /// Runs of consecutive dirty pages within a group: the destages a
    /// drain would issue.
    pub fn dirty_runs(&self) -> u64 {
        self.dirty.runs() as u64
    }
    pub fn dirty_pages(&self) -> u64 {
        self.dirty.pages() as u64
    }
    /// Per volume, in volume order: its dirty pages and page hits.
    pub fn volume_counts(&self) -> Vec<VolumeCounts> {
        self.volumes.iter().map(|v| v.counts).collect()
    }
    pub(super) fn counts_mut(&mut self, key: PageKey) -> &mut VolumeCounts {
        &mut self.volumes[key.volume().0 as usize].counts
    }
    pub fn capacity_pages(&self) -> u64 {
        self.slots.len() as u64
    }
    /// Current (low, high) destage thresholds in pages (of the host journal
    /// under journaled write-back).
    pub fn thresholds_pages(&self) -> (u64, u64) {
        self.rate.thresholds_pages(self.rate_capacity_pages())
    }
    pub fn requests_in_flight(&self) -> u32 {
        self.reqs.live_count()
    }
    pub fn destages_in_flight(&self) -> u32 {
        self.destager.in_flight()
    }
    /// How slot frees are gathered into one `FreeSlots`: until the oldest
    /// has waited `delay_ns` or `batch_slots` of them wait, and at the next
    /// step while writes wait for room or a drain runs (default 1 ms or 32, or
    /// 0: each completion's frees go out at once). The one mechanism that
    /// batches record frees: a driver whose frees cost a flush asks for
    /// longer rounds, and its free thread runs each as it comes.
    pub fn set_free_gathering(&mut self, delay_ns: u64, batch_slots: usize) {
        self.free_delay_ns = delay_ns;
        self.free_batch_slots = batch_slots.max(1);
    }
    /// Nothing in flight and nothing to hand out.
    pub fn is_idle(&self) -> bool {
        self.reqs.live_count() == 0
            && self.destager.in_flight() == 0
            && self.commands.is_empty()
            && self.responses.is_empty()
    }

    /// Destage everything at full rate until no dirty page is left
    /// (shutdown, flush), in one sweep of the destage order (no group counts
    /// as recently written while draining; see `GroupView::draining`).
    pub fn start_drain(&mut self) {
        self.draining = true;
        self.start_destages();
        self.emit_frees(Nanos::MAX);
        self.log_step();
    }
    /// Issue every slot free gathered so far now, batch or no batch (before a
    /// shutdown, so the cache is left with no stale records it could avoid).
    pub fn flush_frees(&mut self) {
        self.emit_frees(Nanos::MAX);
        self.log_step();
    }
    pub fn stop_drain(&mut self) {
        self.draining = false;
    }

    /// Transactions journaled write-back committed under consistency
    /// points without one declared, because its journal was full or a
    /// drain emptied the cache (0 under other policies): the backing alone
    /// may then stop at that boundary too.
    pub fn journal_forced_commits(&self) -> u64 {
        self.journal.as_ref().map_or(0, Journal::forced_commits)
    }

    /// An application's consistency point (journaled write-back): the open
    /// transaction commits here, so the backing alone will pass through
    /// the state of every write answered before now.
    /// Returns the transactions committed so far.
    pub fn consistency_point(&mut self, now: Nanos) -> Result<u64, NotJournaled> {
        if self.journal.is_none() {
            return Err(NotJournaled(self.write_policy.name()));
        }
        self.advance_ages(now);
        self.journal_point();
        self.start_destages();
        Ok(self.journal.as_ref().map_or(0, Journal::commits))
    }

    pub fn poll_command(&mut self) -> Option<IoCommand> {
        self.commands.pop_front()
    }
    pub fn poll_response(&mut self) -> Option<Response> {
        self.responses.pop_front()
    }
    pub fn poll_timeout(&self) -> Option<Nanos> {
        [
            self.timers.earliest(),
            self.age_deadline(),
            self.idle_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.advance_ages(now);
        let mut destage = self.ages.has_expired();
        if self.timers.due(Timer::DestageRetry, now) {
            self.timers.set(Timer::DestageRetry, None);
            destage = true;
        }
        if self.timers.due(Timer::Commit, now) {
            self.journal_commit_due();
            destage = true;
        }
        if self.timers.due(Timer::LogRetry, now) {
            self.timers.set(Timer::LogRetry, None);
        }
        if self.idle_deadline().is_some_and(|at| now >= at) {
            self.idle_draining = true;
            destage = true;
        }
        if destage {
            self.start_destages();
        }
        self.emit_frees(now);
        self.log_step();
        self.step_done();
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
    /// While draining no group is recent: a recency-based order (WOW) then
    /// empties the cache in one sweep instead of skipping the groups written
    /// again and coming back for them on a second, sparser sweep, whose
    /// longer seeks roughly halve the page rate on a disk (measured with
    /// `scripts/flush-eta.sh`). Keeping hot groups pays only while the cache
    /// is meant to stay full; a drain is meant to empty it.
    draining: bool,
}

impl Candidates for GroupView<'_> {
    fn len(&self) -> usize {
        self.candidates
    }
    fn next(&self, after: Option<GroupKey>) -> Option<GroupKey> {
        self.dirty
            .next_group(self.keys, after.map(|g| g.0), E_CANDIDATE)
            .map(GroupKey)
    }
    fn recent(&self, key: GroupKey) -> bool {
        !self.draining && self.dirty.group_has(self.keys, key.0, E_RECENT)
    }
    fn set_recent(&mut self, key: GroupKey, on: bool) {
        let before = self.dirty.set_group_flags(self.keys, key.0, E_RECENT, on);
        if !on && before & E_RECENT != 0 {
            *self.skips += 1;
        }
    }
}
