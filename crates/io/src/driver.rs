//! `Driver`: runs one sans-IO `Engine` for real — the engine decides, the
//! driver moves bytes.
//!
//! Threading. The engine is single-threaded, so it sits behind one mutex and
//! is only ever touched for metadata work (the lock is held for
//! `handle_*`/`poll_*` calls, never across a device call). Client threads
//! call `submit`, which hands the request to the engine and then *runs the
//! resulting commands itself* (run to completion: no thread handoff on the
//! common path, so QD1 latency is the device's plus a lock). Extra commands
//! of one request, destages, and everything the timer releases go to a pool
//! of I/O threads. A timer thread calls `handle_timeout` at `poll_timeout()`
//! (the engine's destage retry after a backing error). Both cores are used
//! by the client threads and the pool.
//!
//! Bytes. Request buffers are the caller's own slices, borrowed for the life
//! of the blocking `submit` call (the engine answers a request only after
//! every command naming its buffer completed, so no command outlives the
//! borrow). Commands reach them through raw pointers resolved under the
//! engine lock. A whole-page write from a request goes straight from the
//! caller's buffer to the cache device; a partial page is built in a
//! per-thread aligned scratch page (old slot or backing page, then the patch).
//!
//! Durability contract (the engine relies on it for every acknowledgement):
//! a command is completed only when its writes are durable — a cache write
//! after the cache device's flush (group-committed: one flush covers every
//! write that finished before it started) unless the device says
//! `writes_durable()`, and a backing write likewise on the backing. The one
//! exception is a clean copy of a read miss (`WritePage` whose record is not
//! dirty): nothing acknowledged depends on it, so it completes once written,
//! without a flush (see `docs/consistency.md`).
//! This module must never complete a command early, and never make a policy
//! decision.

mod admit;
mod async_write;
mod batch;
mod data_path;
mod errors;
pub use errors::{DrainError, RequestError, StartError};
mod flusher;
mod log;
mod pool;
use pool::Pool;
mod submit;
pub use {async_write::DriverBatch, data_path::DataPath, submit::Io};
mod frees;
mod gate;
mod waiter;
use admit::Admit;
use gate::Device;
use waiter::{Waiter, WaiterState};
mod uring;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wcache_core::time::Nanos;
use wcache_core::{
    ChangeError, Engine, EngineConfig, IoCommand, IoError, PageBase, RecoveredSlot, Request,
    RequestFlags, RequestKind, Retuned, SlotRecord, Source, Stats, SubmitError,
};

use crate::device::{
    is_aligned, read_aligned, write_aligned, write_zeros, AlignedBuf, BlockDevice, DeviceError,
};
use crate::store::CacheStore;
use wcache_core::types::{RequestId, SlotIndex, VolumeId};

/// Tunables of the driver.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// I/O threads for destages and the extra commands of large requests.
    pub io_threads: usize,
    /// Persist-on-flush: a write without FUA is answered once written to
    /// the cache device, before the device flush (`docs/consistency.md`).
    pub persist_on_flush: bool,
    /// Persist-on-flush: the cache device is flushed at least this often
    /// while page writes arrive, so an acknowledged write is durable within
    /// about this long even with no FLUSH or FUA. `None`: only at FLUSH,
    /// FUA and record frees.
    pub flush_interval: Option<Duration>,
    /// Use the event-driven data path (`driver/uring.rs`) for `write_async`
    /// when the cache device offers io_uring (`BlockDevice::uring_target`)
    /// and the kernel lets us set up a ring; `false`: the threads only.
    pub io_uring: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            io_threads: 4,
            persist_on_flush: false,
            flush_interval: Some(FLUSH_INTERVAL_DEFAULT),
            io_uring: true,
        }
    }
}

/// What `DriverBatch::write_async` calls, once, with the outcome, the buffer,
/// and `more`: true when another answer follows at once on this thread (a
/// caller may batch its replies until one comes with `more` false).
pub type WriteDone = Box<dyn FnOnce(Result<(), RequestError>, Vec<u8>, bool) + Send>;

/// The caller's payload for one request.
pub enum Payload<'a> {
    None,
    Write(&'a [u8]),
    Read(&'a mut [u8]),
}

/// Counters of the driver (the engine keeps its own `Stats`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DriverStats {
    pub requests: u64,
    pub cache_errors: u64,
    pub backing_errors: u64,
    pub cache_flushes: u64,
    pub backing_flushes: u64,
    pub last_error: Option<String>,
}

/// A caller's buffer, valid while its request is in flight.
#[derive(Clone, Copy)]
struct BufPtr {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only dereferenced while the owning `submit` call
// blocks (see the module header), and the engine never issues two commands
// that write the same bytes of one request buffer.
unsafe impl Send for BufPtr {}

impl BufPtr {
    const NONE: BufPtr = BufPtr {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// # Safety
    /// The request owning the buffer must be in flight.
    unsafe fn slice(&self, offset_bytes: u64, len_bytes: usize) -> &[u8] {
        let start = offset_bytes as usize;
        assert!(
            start + len_bytes <= self.len,
            "command beyond request buffer"
        );
        std::slice::from_raw_parts(self.ptr.add(start), len_bytes)
    }

    /// # Safety
    /// As `slice`, and no other live reference covers these bytes.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice_mut(&self, offset_bytes: u64, len_bytes: usize) -> &mut [u8] {
        let start = offset_bytes as usize;
        assert!(
            start + len_bytes <= self.len,
            "command beyond request buffer"
        );
        std::slice::from_raw_parts_mut(self.ptr.add(start), len_bytes)
    }
}

/// Commands a client thread runs itself before handing more to the pool:
/// a handoff costs a thread wake-up, more than a fast device's whole I/O.
const INLINE_JOBS_MAX: usize = 2;

/// Page writes run together as one batch (their data by runs of
/// consecutive slots, their records by block, one durability barrier):
/// up to a 1 MiB request of 4 KiB pages, or that many queued pages.
const WRITE_BATCH_MAX: usize = 256;

/// `DriverConfig::flush_interval` unless set otherwise.
pub const FLUSH_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);

/// Threads that write record blocks while the page data of the same batches
/// is written (devices whose writes wait for the medium: `dsync`).
const RECORD_WRITERS: usize = 4;

struct Job {
    cmd: IoCommand,
    buf: BufPtr,
    /// A `WriteBatch`'s pages' buffers, in order (empty for other commands).
    bufs: Vec<BufPtr>,
}

thread_local! {
    static WAITER: Arc<Waiter> = Arc::new(Waiter { state: Mutex::new(WaiterState::default()), ready: Condvar::new() });
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    page: AlignedBuf,
    bounce: AlignedBuf,
    /// Reused by write batches (no allocation per batch once grown).
    batch: BatchScratch,
}

#[derive(Default)]
struct BatchScratch {
    results: Vec<Result<(), IoError>>,
    crcs: Vec<u32>,
    whole: Vec<u32>,
    records: Vec<(SlotIndex, SlotRecord, u32)>,
    record_jobs: Vec<u32>,
    order: Vec<u32>,
    staged: Vec<crate::store::Staged>,
    own: crate::store::OwnWrites,
}

struct InFlight {
    buf: BufPtr,
    responder: Responder,
}

/// Who is told a request's response.
enum Responder {
    /// A thread blocked in `submit`.
    Thread(Arc<Waiter>),
    /// `write_async`'s callback, which owns the request's buffer.
    Async(AsyncWrite),
}

struct AsyncWrite {
    /// Never touched while the request is in flight (commands reach its
    /// bytes through `InFlight::buf`); its heap block does not move.
    buffer: Vec<u8>,
    done: WriteDone,
}

/// Which new requests the driver refuses with `RequestError::ShutDown`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refusing {
    Nothing,
    /// Writes, trims and write-zeroes (a stop that drains first).
    Writes,
    /// Every request (the end of a stop's grace period).
    Everything,
}

struct Core {
    engine: Engine,
    in_flight: HashMap<u64, InFlight>,
    /// Threads waiting on `Shared::changed`.
    changed_waiters: u32,
    stopping: bool,
    /// New requests are refused (`fail_waiting`): a stop is under way.
    refusing: Refusing,
    /// The deadline the timer thread sleeps until (None: no deadline, or awake).
    timer_armed: Option<Nanos>,
}

/// A checkpoint command for a backing that keeps no journal (the cache
/// lifecycle opens one for journaled write-back; the NVRAM journal is a
/// simulator model).
fn no_journal(b: &Device) -> DeviceError {
    DeviceError::Open {
        device: b.dev.name(),
        what: "journaled write-back needs a backing journal (--backing-journal)".into(),
    }
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    cache_errors: AtomicU64,
    backing_errors: AtomicU64,
    cache_flushes: AtomicU64,
    backing_flushes: AtomicU64,
    /// Batches of page writes run (the flusher's sign of new writes).
    cache_page_writes: AtomicU64,
}

struct Shared {
    core: Mutex<Core>,
    /// Signalled when requests finish or destages complete (busy retry, drain).
    changed: Condvar,
    /// Signalled when the engine may have a new timeout.
    timer: Condvar,
    pool: Mutex<Pool>,
    pool_ready: Condvar,
    cache: Device,
    /// The on-device format (persistent caches): records beside the pages.
    store: Option<Arc<CacheStore>>,
    /// Format 3 (log mode; `store` is then None): batches and tail moves.
    log: Option<crate::store::LogWriter>,
    /// Format 3: the buffer batches are built in, one for all threads
    /// (batches go one at a time; `log.rs`).
    batch_buf: Mutex<AlignedBuf>,
    /// Where slot 0's page lies on the cache device (0 without a store).
    data_offset_bytes: u64,
    backings: Vec<Device>,
    page_size_bytes: u64,
    origin: Instant,
    next_request: AtomicU64,
    counters: Counters,
    last_error: Mutex<Option<String>>,
    /// Persist-on-flush: a page write completes once written; FLUSH and FUA
    /// requests make the cache device durable before they are answered.
    persist_on_flush: std::sync::atomic::AtomicBool,
    /// `shutdown_within` passed its deadline: no thread starts another
    /// command (jobs in hand are dropped, never completed, so nothing more
    /// is acknowledged); the process is about to exit.
    abandoned: std::sync::atomic::AtomicBool,
    /// Record frees waiting for the free thread (`frees.rs`).
    frees: frees::FreeQueue,
    /// Stops the persist-on-flush flusher thread (`flusher.rs`).
    flusher: flusher::FlusherStop,
    /// The event-driven data path, when chosen at start.
    uring: Option<uring::Uring>,
    data_path: DataPath,
    /// Responses of `write_async` requests, to be told outside the engine
    /// lock (`run_answered`).
    answered: Mutex<Vec<(AsyncWrite, Result<(), IoError>)>>,
    answered_any: std::sync::atomic::AtomicBool,
}

pub struct Driver {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Driver {
    /// Starts an engine over `cache` with one volume per backing device
    /// (volume `i` is `backings[i]`, sized as the device). The cache keeps no
    /// records: nothing survives the process (`persistent` must be false).
    pub fn new(
        engine_config: EngineConfig,
        cache: Arc<dyn BlockDevice>,
        backings: Vec<Arc<dyn BlockDevice>>,
        config: DriverConfig,
    ) -> Result<Driver, StartError> {
        assert!(
            !engine_config.persistent,
            "a persistent engine needs a CacheStore (Driver::recover)"
        );
        Driver::start(
            engine_config,
            cache,
            None,
            Vec::new(),
            backings,
            (config, None),
        )
    }

    /// Starts a persistent engine over a formatted cache device: `found` are
    /// the verified records of `store.scan(true)` (empty for a new device),
    /// handed to `Engine::recover`, whose first commands free the versions it
    /// does not keep. Sets `persistent`, and takes page size and slot count
    /// from the format (a different value in `engine_config` is an error).
    pub fn recover(
        mut engine_config: EngineConfig,
        store: Arc<CacheStore>,
        found: Vec<RecoveredSlot>,
        backings: Vec<Arc<dyn BlockDevice>>,
        config: DriverConfig,
    ) -> Result<Driver, StartError> {
        let layout = store.layout();
        if engine_config.page_size_bytes != layout.page_size_bytes {
            return Err(StartError::FormatMismatch {
                field: "page_size_bytes",
                config: engine_config.page_size_bytes,
                format: layout.page_size_bytes,
            });
        }
        if engine_config.cache_slots != layout.slot_count {
            return Err(StartError::FormatMismatch {
                field: "cache_slots",
                config: engine_config.cache_slots,
                format: layout.slot_count,
            });
        }
        engine_config.persistent = true;
        let cache = store.device().clone();
        Driver::start(
            engine_config,
            cache,
            Some(store),
            found,
            backings,
            (config, None),
        )
    }

    fn start(
        engine_config: EngineConfig,
        cache: Arc<dyn BlockDevice>,
        store: Option<Arc<CacheStore>>,
        found: Vec<RecoveredSlot>,
        backings: Vec<Arc<dyn BlockDevice>>,
        (config, log): (
            DriverConfig,
            Option<(crate::store::LogWriter, wcache_core::LogPosition)>,
        ),
    ) -> Result<Driver, StartError> {
        let page = engine_config.page_size_bytes;
        // Records written beside the page data, by threads of their own.
        let persistent = store.is_some();
        let overlapped = persistent && cache.writes_wait_for_medium();
        // Record frees in rounds of the free thread where each costs a
        // flush or a write that waits for the medium; on memory-like
        // devices (`nvram`) a free is a copy, cheaper done where it arises.
        let gather_frees = persistent && (!cache.writes_durable() || overlapped);
        assert!(
            !overlapped || cache.writes_durable(),
            "a device whose writes wait for the medium has durable writes"
        );
        let log_store = log.as_ref().map(|(w, _)| w.store().as_ref());
        check_cache(&engine_config, &cache, store.as_deref().or(log_store))?;
        for dev in std::iter::once(&cache).chain(backings.iter()) {
            let a = dev.alignment_bytes();
            if a > 1 && (!page.is_multiple_of(a as u64) || a > AlignedBuf::ALIGNMENT_BYTES) {
                return Err(StartError::PageNotAligned {
                    device: dev.name(),
                    alignment_bytes: a,
                    page_size_bytes: page,
                });
            }
        }
        let sizes: Vec<u64> = backings.iter().map(|b| b.len_bytes()).collect();
        let (log, position) = log.map_or((None, None), |(w, at)| (Some(w), Some(at)));
        let engine = if let Some(at) = position {
            Engine::recover_log_mode(engine_config.clone(), &sizes, found, at)?
        } else if store.is_some() {
            let mut engine = Engine::recover(engine_config.clone(), &sizes, found)?;
            if gather_frees {
                // A free costs a flush here: longer rounds, run by the free
                // thread as they come (`frees.rs`).
                engine.set_free_gathering(frees::GATHER_DELAY_NS, frees::GATHER_SLOTS);
            }
            engine
        } else {
            let mut engine = Engine::new(engine_config.clone())?;
            for b in &backings {
                engine.add_volume(b.len_bytes())?;
            }
            engine
        };
        let (uring, data_path) =
            uring::Uring::choose(&cache, store.is_some(), log.is_some(), &config);
        let shared = Arc::new(Shared {
            core: Mutex::new(Core {
                engine,
                in_flight: HashMap::with_capacity(engine_config.requests_max as usize),
                changed_waiters: 0,
                timer_armed: None,
                stopping: false,
                refusing: Refusing::Nothing,
            }),
            changed: Condvar::new(),
            timer: Condvar::new(),
            pool: Mutex::new(Pool::default()),
            pool_ready: Condvar::new(),
            cache: Device::new(cache),
            data_offset_bytes: (store.as_ref().or(log.as_ref().map(|l| l.store())))
                .map_or(0, |s| s.layout().data_offset_bytes),
            store,
            log,
            batch_buf: Mutex::new(AlignedBuf::new()),
            backings: backings.into_iter().map(Device::new).collect(),
            page_size_bytes: page,
            origin: Instant::now(),
            next_request: AtomicU64::new(1),
            counters: Counters::default(),
            last_error: Mutex::new(None),
            persist_on_flush: std::sync::atomic::AtomicBool::new(config.persist_on_flush),
            abandoned: std::sync::atomic::AtomicBool::new(false),
            frees: frees::FreeQueue::new(gather_frees),
            flusher: flusher::FlusherStop::default(),
            uring,
            data_path,
            answered: Mutex::new(Vec::new()),
            answered_any: std::sync::atomic::AtomicBool::new(false),
        });
        uring::Uring::watch_store(&shared);
        let threads = spawn_threads(&shared, &config, overlapped, gather_frees)?;
        // Recovery's first commands (FreeSlots of the versions not kept).
        let mut jobs = VecDeque::new();
        {
            let mut core = shared.lock_core();
            shared.pump(&mut core, &mut jobs);
        }
        shared.to_pool(jobs.into_iter());
        Ok(Driver {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The on-device format, for a persistent cache.
    /// Persist-on-flush (`true`) or persist-on-write (`false`, the default):
    /// with persist-on-flush a write without FUA is acknowledged once its
    /// page data and record are written to the cache device, before they are
    /// durable; a FLUSH request, and a write with FUA, is answered only after
    /// a cache device flush that started after it was received (and so after
    /// every write acknowledged before it). Record frees keep their barrier,
    /// so an old version is never overwritten before its newer one is
    /// durable. See `docs/consistency.md`, "Persistence modes".
    pub fn set_persist_on_flush(&self, on: bool) {
        self.shared.persist_on_flush.store(on, Ordering::Relaxed);
    }

    pub fn persist_on_flush(&self) -> bool {
        self.shared.persist_on_flush.load(Ordering::Relaxed)
    }

    pub fn store(&self) -> Option<&Arc<CacheStore>> {
        let log = self.shared.log.as_ref().map(|l| l.store());
        self.shared.store.as_ref().or(log)
    }

    /// True when no command is in flight and no page is dirty (everything
    /// acknowledged is on the backings).
    /// No request and no command in flight (dirty pages may remain).
    pub fn is_idle(&self) -> bool {
        self.shared.lock_core().engine.is_idle()
    }

    pub fn is_clean(&self) -> bool {
        let core = self.shared.lock_core();
        core.engine.dirty_pages() == 0 && core.engine.is_idle()
    }

    pub fn page_size_bytes(&self) -> u64 {
        self.shared.page_size_bytes
    }

    pub fn volume_count(&self) -> usize {
        self.shared.backings.len()
    }

    pub fn volume_size_bytes(&self, volume: VolumeId) -> Option<u64> {
        self.shared
            .backings
            .get(volume.0 as usize)
            .map(|d| d.dev.len_bytes())
    }

    pub fn read(
        &self,
        volume: VolumeId,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), RequestError> {
        let len = buf.len() as u64;
        self.submit(
            volume,
            RequestKind::Read,
            offset_bytes,
            len,
            RequestFlags::default(),
            Payload::Read(buf),
        )
    }

    pub fn write(
        &self,
        volume: VolumeId,
        offset_bytes: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), RequestError> {
        let flags = RequestFlags {
            fua,
            ..RequestFlags::default()
        };
        let len = data.len() as u64;
        self.submit(
            volume,
            RequestKind::Write,
            offset_bytes,
            len,
            flags,
            Payload::Write(data),
        )
    }

    pub fn flush(&self, volume: VolumeId) -> Result<(), RequestError> {
        self.submit(
            volume,
            RequestKind::Flush,
            0,
            0,
            RequestFlags::default(),
            Payload::None,
        )
    }

    /// Destage every dirty page; returns when none is left.
    pub fn drain(&self) -> Result<(), DrainError> {
        self.drain_timeout(Duration::MAX)
    }

    /// As `drain`, giving up after `timeout` (for example while the backing fails).
    pub fn drain_timeout(&self, timeout: Duration) -> Result<(), DrainError> {
        let start = Instant::now();
        let s = &self.shared;
        let mut core = s.lock_core();
        if core.stopping {
            return Err(DrainError::ShutDown);
        }
        core.engine.start_drain();
        let mut jobs = VecDeque::new();
        s.pump(&mut core, &mut jobs);
        s.to_pool(jobs.drain(..));
        loop {
            if core.engine.dirty_pages() == 0 && core.engine.destages_in_flight() == 0 {
                core.engine.stop_drain();
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                core.engine.stop_drain();
                return Err(DrainError::Timeout {
                    waited_ms: waited.as_millis() as u64,
                    dirty_pages: core.engine.dirty_pages(),
                });
            }
            core.changed_waiters += 1;
            let wait = (timeout - waited).min(Duration::from_millis(100));
            core = s
                .changed
                .wait_timeout(core, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            core.changed_waiters -= 1;
        }
    }

    pub fn dirty_pages(&self) -> u64 {
        self.shared.lock_core().engine.dirty_pages()
    }

    /// Reads the engine under its lock, so what `read` gathers is of one
    /// moment (an online drain's progress).
    pub fn inspect_engine<R>(&self, read: impl FnOnce(&Engine) -> R) -> R {
        read(&self.shared.lock_core().engine)
    }

    /// Runs `change` on the engine under its lock (an online policy change,
    /// `Engine::set_*`), then sends out whatever commands it made (a new
    /// destage rate may start destages at once).
    pub fn change_engine<R>(&self, change: impl FnOnce(&mut Engine) -> R) -> R {
        let s = &self.shared;
        let mut core = s.lock_core();
        let result = change(&mut core.engine);
        let mut jobs = VecDeque::new();
        s.pump(&mut core, &mut jobs);
        s.changed.notify_all();
        drop(core);
        s.to_pool(jobs.into_iter());
        result
    }

    /// Per volume: its dirty pages and page hits (`Engine::volume_counts`).
    pub fn volume_counts(&self) -> Vec<wcache_core::VolumeCounts> {
        self.shared.lock_core().engine.volume_counts()
    }

    /// `Engine::retune` at this moment of the driver's clock, then sends out
    /// what that started; the configuration before and after.
    pub fn retune(&self, change: impl FnOnce(&mut EngineConfig)) -> Result<Retuned, ChangeError> {
        let now = self.shared.now();
        self.change_engine(|e| e.retune(now, change))
    }

    /// An application's consistency point (journaled write-back): the open
    /// transaction commits now. Returns the transactions committed so far.
    pub fn consistency_point(&self) -> Result<u64, wcache_core::engine::NotJournaled> {
        let now = self.shared.now();
        self.change_engine(|e| e.consistency_point(now))
    }

    /// Reports every engine counter and gauge (`Engine::visit_metrics`)
    /// under one lock, so the numbers are of one moment.
    pub fn visit_metrics(&self, v: &mut dyn wcache_core::metrics::MetricsVisitor) {
        let now = self.shared.now();
        self.shared.lock_core().engine.visit_metrics(now, v);
    }

    /// Each volume's backing device, in volume order (its health, its release).
    pub fn backing_devices(&self) -> impl Iterator<Item = &dyn BlockDevice> {
        self.shared.backings.iter().map(|b| &*b.dev)
    }

    /// The names of the policies in force (`Engine::policy_names`).
    pub fn policy_names(&self) -> [&'static str; 4] {
        self.shared.lock_core().engine.policy_names()
    }

    pub fn engine_stats(&self) -> Stats {
        self.shared.lock_core().engine.stats().clone()
    }

    pub fn stats(&self) -> DriverStats {
        let c = &self.shared.counters;
        DriverStats {
            requests: c.requests.load(Ordering::Relaxed),
            cache_errors: c.cache_errors.load(Ordering::Relaxed),
            backing_errors: c.backing_errors.load(Ordering::Relaxed),
            cache_flushes: c.cache_flushes.load(Ordering::Relaxed),
            backing_flushes: c.backing_flushes.load(Ordering::Relaxed),
            last_error: self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// The end of a stop's grace period: refuses every new request
    /// (`RequestError::ShutDown`, also to callers waiting while busy) and
    /// answers every stalled write with `IoError::Io` — never admitted,
    /// nothing of them was acknowledged, and no command names their
    /// buffers (`Engine::fail_stalled`). Requests admitted stay as they are:
    /// they finish when their device calls return. Returns how many writes
    /// were failed.
    pub fn fail_waiting(&self) -> u64 {
        let s = &self.shared;
        let mut core = s.lock_core();
        core.refusing = Refusing::Everything;
        let now = s.now();
        let failed_count = core.engine.fail_stalled(now, IoError::Io);
        let mut jobs = VecDeque::new();
        s.pump(&mut core, &mut jobs);
        s.changed.notify_all();
        drop(core);
        s.to_pool(jobs.into_iter());
        failed_count
    }

    /// Refuse (or accept again) writes, trims and write-zeroes with
    /// `RequestError::ShutDown`, before they reach the engine; reads and
    /// flushes go on (a stop that drains first).
    pub fn refuse_writes(&self, on: bool) {
        let mut core = self.shared.lock_core();
        if core.refusing != Refusing::Everything {
            core.refusing = if on {
                Refusing::Writes
            } else {
                Refusing::Nothing
            };
        }
    }

    /// Stops the I/O and timer threads after the commands in hand are done.
    /// Requests still in flight may fail; callers stop submitting first.
    /// Dirty pages stay dirty (call `drain` first to destage them).
    pub fn shutdown(&self) {
        self.shutdown_within(Duration::MAX);
    }

    /// As `shutdown`, waiting at most `timeout` for the threads: a thread
    /// blocked in a device call that does not return (a backing that stopped
    /// answering) is left running, and `false` is returned. Nothing that
    /// thread holds was acknowledged (a command completes only when its
    /// device call returns), so the caller may record the cache's state and
    /// exit the process without it; it must not go on using the devices.
    /// After the deadline no thread starts another command: commands not
    /// yet started are dropped (a destage not run keeps its pages dirty; a
    /// record free not run leaves an older record, which recovery frees).
    pub fn shutdown_within(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        {
            let mut core = self.shared.lock_core();
            if core.stopping {
                return self
                    .threads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty();
            }
            // Slot frees the engine batches go out now (cache device writes,
            // run here); anything else goes to the pool, so that a backing
            // call cannot hold this thread.
            core.engine.flush_frees();
            let mut jobs = VecDeque::new();
            self.shared.pump(&mut core, &mut jobs);
            drop(core);
            let (mut frees, rest): (VecDeque<Job>, VecDeque<Job>) = jobs
                .into_iter()
                .partition(|j| matches!(j.cmd, IoCommand::FreeSlots { .. }));
            self.shared.to_pool(rest.into_iter());
            self.shared.run_jobs(&mut frees, None);
        }
        {
            let mut core = self.shared.lock_core();
            core.stopping = true;
            self.shared.timer.notify_all();
            self.shared.changed.notify_all();
        }
        {
            let mut pool = self.shared.pool.lock().unwrap_or_else(|p| p.into_inner());
            pool.stopping = true;
            self.shared.pool_ready.notify_all();
        }
        self.shared.frees.stop();
        self.shared.flusher.stop();
        if let Some(u) = &self.shared.uring {
            // Its thread ends once the writes in flight are answered.
            u.stop();
        }
        if let Some(store) = &self.shared.store {
            // Threads still awaiting record writes write their blocks themselves.
            store.stop_writers();
        }
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        if timeout == Duration::MAX {
            for t in std::mem::take(&mut *threads) {
                let _ = t.join();
            }
            return true;
        }
        loop {
            for t in std::mem::take(&mut *threads) {
                if t.is_finished() {
                    let _ = t.join();
                } else {
                    threads.push(t);
                }
            }
            if threads.is_empty() {
                return true;
            }
            if start.elapsed() >= timeout {
                self.shared.abandoned.store(true, Ordering::SeqCst);
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the driver cannot run: the engine's log mode without a format-3
/// store (or such a store without it), a cache device smaller than its slots.
fn check_cache(
    engine_config: &EngineConfig,
    cache: &Arc<dyn BlockDevice>,
    store: Option<&CacheStore>,
) -> Result<(), StartError> {
    if engine_config.log != store.is_some_and(|s| s.layout().log) {
        return Err(StartError::LogModeNotBuilt);
    }
    let page = engine_config.page_size_bytes;
    let data_offset_bytes = store.map_or(0, |s| s.layout().data_offset_bytes);
    let need_bytes = engine_config
        .cache_slots
        .saturating_mul(page)
        .saturating_add(data_offset_bytes);
    if cache.len_bytes() < need_bytes {
        return Err(StartError::CacheTooSmall {
            device: cache.name(),
            size_bytes: cache.len_bytes(),
            cache_slots: engine_config.cache_slots,
            page_size_bytes: page,
            need_bytes,
        });
    }
    Ok(())
}

/// Starts the driver's threads: the I/O pool, the timer, and for a
/// persistent cache the persist-on-flush flusher (with an interval), the
/// free thread (`gather_frees`) and the record writers (`overlapped`).
fn spawn_threads(
    shared: &Arc<Shared>,
    config: &DriverConfig,
    overlapped: bool,
    gather_frees: bool,
) -> Result<Vec<JoinHandle<()>>, StartError> {
    let mut threads = Vec::new();
    let mut spawn = |name: String, f: Box<dyn FnOnce() + Send>| -> Result<(), StartError> {
        let t = std::thread::Builder::new()
            .name(name.clone())
            .spawn(f)
            .map_err(|source| StartError::Spawn {
                thread: name,
                source,
            })?;
        threads.push(t);
        Ok(())
    };
    let pool_threads = config.io_threads.max(1);
    for i in 0..pool_threads {
        let s = shared.clone();
        let most = pool::most_for(i, pool_threads);
        spawn(
            format!("wcache-io-{i}"),
            Box::new(move || s.pool_thread(most)),
        )?;
    }
    if let Some(store) = &shared.store {
        if let Some(interval) = config.flush_interval {
            let s = shared.clone();
            spawn(
                "wcache-flusher".into(),
                Box::new(move || s.flusher_thread(interval)),
            )?;
        }
        if gather_frees {
            let s = shared.clone();
            spawn("wcache-frees".into(), Box::new(move || s.free_thread()))?;
        }
        for i in (0..RECORD_WRITERS).filter(|_| overlapped) {
            let store = store.clone();
            spawn(
                format!("wcache-records-{i}"),
                Box::new(move || store.run_writer()),
            )?;
        }
    }
    if shared.uring.is_some() {
        let s = shared.clone();
        spawn(
            "wcache-uring".into(),
            Box::new(move || {
                if let Some(u) = &s.uring {
                    u.run(&s);
                }
            }),
        )?;
    }
    let s = shared.clone();
    spawn("wcache-timer".into(), Box::new(move || s.timer_thread()))?;
    Ok(threads)
}

impl Shared {
    fn lock_core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Nanos {
        Nanos(self.origin.elapsed().as_nanos() as u64)
    }

    fn run_request(
        &self,
        request: Request,
        buf: BufPtr,
        waiter: &Arc<Waiter>,
    ) -> Result<(), RequestError> {
        let stale = waiter.take();
        debug_assert!(stale.is_none(), "waiter reused while set");
        let entry = InFlight {
            buf,
            responder: Responder::Thread(waiter.clone()),
        };
        let mut jobs = self.admit(request, entry).map_err(|refused| refused.0)?;
        self.run_answered();
        self.run_jobs(&mut jobs, Some(waiter));
        waiter.wait()?;
        let needs_flush = match request.kind {
            RequestKind::Flush => true,
            RequestKind::Write | RequestKind::WriteZeroes => request.flags.fua,
            RequestKind::Read | RequestKind::Trim => false,
        };
        if needs_flush && self.persist_on_flush.load(Ordering::Relaxed) {
            // Every write acknowledged before this request returned from the
            // device before this flush starts (group commit: a flush that
            // started after this call).
            self.make_durable(&self.cache, true)
                .map_err(|e| RequestError::Io(self.io_fail(&e, true)))?;
        }
        Ok(())
    }

    /// Tells the `write_async` callbacks their responses (outside the
    /// engine lock: a callback sends a reply on a socket).
    fn run_answered(&self) {
        if !self.answered_any.load(Ordering::Acquire) {
            return;
        }
        let answered = {
            let mut list = self.answered.lock().unwrap_or_else(|p| p.into_inner());
            self.answered_any.store(false, Ordering::Release);
            std::mem::take(&mut *list)
        };
        let last = answered.len().saturating_sub(1);
        for (k, (a, result)) in answered.into_iter().enumerate() {
            (a.done)(result.map_err(RequestError::Io), a.buffer, k < last);
        }
    }

    /// Moves the engine's commands into `jobs` and its responses to their waiters.
    fn pump(&self, core: &mut Core, jobs: &mut VecDeque<Job>) {
        let mut answered = false;
        while let Some(cmd) = core.engine.poll_command() {
            let req = command_request(&cmd);
            let buf_of = |r: Option<RequestId>| match r {
                Some(r) => {
                    core.in_flight
                        .get(&r.0)
                        .expect("command names a request in flight")
                        .buf
                }
                None => BufPtr::NONE,
            };
            let bufs = match &cmd {
                IoCommand::WriteBatch { pages, .. } => {
                    pages.iter().map(|p| buf_of(command_request(p))).collect()
                }
                _ => Vec::new(),
            };
            let buf = buf_of(req);
            jobs.push_back(Job { cmd, buf, bufs });
        }
        while let Some(response) = core.engine.poll_response() {
            let entry = core
                .in_flight
                .remove(&response.id.0)
                .expect("response for a request in flight");
            match entry.responder {
                Responder::Thread(waiter) => waiter.set(response.result),
                Responder::Async(a) => {
                    let mut list = self.answered.lock().unwrap_or_else(|p| p.into_inner());
                    list.push((a, response.result));
                    self.answered_any.store(true, Ordering::Release);
                }
            }
            answered = true;
        }
        if answered && core.changed_waiters > 0 {
            self.changed.notify_all();
        }
        // Wake the timer only for a deadline earlier than the one it sleeps to.
        if let Some(at) = core.engine.poll_timeout() {
            if core.timer_armed.is_none_or(|armed| at < armed) {
                core.timer_armed = Some(at);
                self.timer.notify_one();
            }
        }
    }

    /// Executes jobs and whatever their completions release. A client thread
    /// (`own` set) runs up to `INLINE_JOBS_MAX` commands itself (a
    /// write-through page: cache write and backing write) and hands the rest,
    /// and all destages, to the pool; once its own request is answered it
    /// hands everything over.
    fn run_jobs(&self, jobs: &mut VecDeque<Job>, own: Option<&Arc<Waiter>>) {
        while !jobs.is_empty() {
            if self.abandoned.load(Ordering::Relaxed) {
                jobs.clear();
                return;
            }
            if let Some(w) = own {
                if w.is_set() {
                    // Record frees after the response (the old version of an
                    // overwritten page) are one small write on a device that
                    // needs no flush: cheaper here than a pool thread's wake-up.
                    let is_cheap = |j: &Job| {
                        matches!(j.cmd, IoCommand::FreeSlots { .. })
                            && self.cache.dev.writes_durable()
                    };
                    if !jobs.iter().any(is_cheap) {
                        self.to_pool(jobs.drain(..));
                        return;
                    }
                    let (cheap, rest): (VecDeque<Job>, VecDeque<Job>) =
                        jobs.drain(..).partition(|j| is_cheap(j));
                    self.to_pool(rest.into_iter());
                    *jobs = cheap;
                    if let Some(job) = jobs.pop_front() {
                        self.execute_and_complete(job, jobs);
                    }
                    continue;
                }
                // Destages always, and commands beyond the first few, go to
                // the pool; page writes stay (they run as one batch).
                let mut kept = 0;
                let hand_over = jobs.iter().any(|j| {
                    let destage = matches!(j.cmd, IoCommand::Destage { .. });
                    kept += usize::from(!destage && !is_page_write(j));
                    destage || kept > INLINE_JOBS_MAX
                });
                if hand_over {
                    let mut kept = 0;
                    let mut keep = VecDeque::new();
                    let rest: Vec<Job> = jobs
                        .drain(..)
                        .filter_map(|j| {
                            if is_page_write(&j) {
                                keep.push_back(j);
                                None
                            } else if !matches!(j.cmd, IoCommand::Destage { .. })
                                && kept < INLINE_JOBS_MAX
                            {
                                kept += 1;
                                keep.push_back(j);
                                None
                            } else {
                                Some(j)
                            }
                        })
                        .collect();
                    self.to_pool(rest.into_iter());
                    *jobs = keep;
                }
                let Some(job) = jobs.pop_front() else {
                    return;
                };
                self.execute_and_complete(job, jobs);
            } else if let Some(job) = jobs.pop_front() {
                self.execute_and_complete(job, jobs);
            }
        }
    }

    fn execute_and_complete(&self, job: Job, jobs: &mut VecDeque<Job>) {
        if matches!(job.cmd, IoCommand::WriteBatch { .. }) {
            return self.execute_and_complete_log_batch(job, jobs);
        }
        if is_batched(&job) {
            // Every page write and record free in hand joins it (up to WRITE_BATCH_MAX).
            let mut batch = Vec::with_capacity(jobs.len() + 1);
            batch.push(job);
            let mut i = 0;
            while i < jobs.len() && batch.len() < WRITE_BATCH_MAX {
                if is_batched(&jobs[i]) {
                    batch.extend(jobs.remove(i));
                } else {
                    i += 1;
                }
            }
            let batch = self.defer_frees(batch);
            if !batch.is_empty() {
                self.execute_and_complete_batch(batch, jobs);
            }
            return;
        }
        let io = job.cmd.io();
        let is_destage = matches!(job.cmd, IoCommand::Destage { .. });
        let result = SCRATCH.with(|s| self.execute(&job, &mut s.borrow_mut()));
        let mut core = self.lock_core();
        let now = self.now();
        core.engine
            .handle_completion(now, io, result)
            .expect("completion of a command the engine issued");
        self.pump(&mut core, jobs);
        if is_destage && core.changed_waiters > 0 {
            self.changed.notify_all();
        }
        drop(core);
        self.run_answered();
    }

    /// Runs a batch of `WritePage` jobs and completes them under one lock.
    fn execute_and_complete_batch(&self, batch: Vec<Job>, jobs: &mut VecDeque<Job>) {
        let results = SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            self.execute_write_batch(&batch, &mut s);
            std::mem::take(&mut s.batch.results)
        });
        let mut core = self.lock_core();
        let now = self.now();
        for (job, result) in batch.iter().zip(&results) {
            core.engine
                .handle_completion(now, job.cmd.io(), *result)
                .expect("completion of a command the engine issued");
        }
        self.pump(&mut core, jobs);
        drop(core);
        self.run_answered();
        SCRATCH.with(|s| s.borrow_mut().batch.results = results);
    }

    /// Counts a failed device call and maps it to the engine's error.
    fn io_fail(&self, e: &DeviceError, on_cache: bool) -> IoError {
        self.note_error(on_cache, e);
        if e.is_no_space() {
            IoError::NoSpace
        } else {
            IoError::Io
        }
    }

    fn note_error(&self, on_cache: bool, e: &DeviceError) {
        let c = if on_cache {
            &self.counters.cache_errors
        } else {
            &self.counters.backing_errors
        };
        c.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
    }

    fn execute(&self, job: &Job, scratch: &mut Scratch) -> Result<(), IoError> {
        let on_cache = matches!(
            job.cmd,
            IoCommand::WritePage { .. } | IoCommand::ReadPage { .. }
        );
        self.execute_inner(job, scratch).map_err(|(e, cache_side)| {
            self.note_error(cache_side.unwrap_or(on_cache), &e);
            if e.is_no_space() {
                IoError::NoSpace
            } else {
                IoError::Io
            }
        })
    }

    /// Read the pages of `slots` into `run`, runs of consecutive slots with one call each.
    fn read_slots(&self, slots: &[SlotIndex], run: &mut [u8]) -> Result<(), DeviceError> {
        let p = self.page_size_bytes as usize;
        let mut i = 0;
        while i < slots.len() {
            let mut j = i + 1;
            while j < slots.len() && slots[j].0 == slots[j - 1].0 + 1 {
                j += 1;
            }
            self.cache
                .dev
                .read_at(&mut run[i * p..j * p], self.slot_offset_bytes(slots[i]))?;
            i = j;
        }
        Ok(())
    }

    fn slot_offset_bytes(&self, slot: SlotIndex) -> u64 {
        self.data_offset_bytes + slot.0 as u64 * self.page_size_bytes
    }

    fn backing(&self, volume: VolumeId) -> &Device {
        &self.backings[volume.0 as usize]
    }

    /// Makes a finished write durable on `dev` (group commit).
    fn make_durable(&self, dev: &Device, on_cache: bool) -> Result<(), DeviceError> {
        if dev.dev.writes_durable() {
            return Ok(());
        }
        if dev.gate.flush(dev.dev.as_ref())? {
            let c = if on_cache {
                &self.counters.cache_flushes
            } else {
                &self.counters.backing_flushes
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Errors carry which side failed (Some(true): cache) when it differs from the command's.
    fn execute_inner(
        &self,
        job: &Job,
        scratch: &mut Scratch,
    ) -> Result<(), (DeviceError, Option<bool>)> {
        let p = self.page_size_bytes;
        let cache = &self.cache;
        let on_cache = |e| (e, Some(true));
        let on_backing = |e| (e, Some(false));
        match &job.cmd {
            IoCommand::FreeSlots { .. }
            | IoCommand::WritePage { .. }
            | IoCommand::WritePages { .. }
            | IoCommand::WriteBatch { .. } => {
                unreachable!("page writes and frees run in batches (execute_write_batch, log.rs)")
            }
            IoCommand::AdvanceLog { .. } | IoCommand::LogCheckpoint { .. } => {
                self.execute_log_start(&job.cmd).map_err(on_cache)
            }
            IoCommand::ReadPage {
                slot,
                page_offset_bytes,
                len_bytes,
                req_offset_bytes,
                ..
            } => {
                // SAFETY: in flight, and the engine gives each byte of a read to one command.
                let dst = unsafe { job.buf.slice_mut(*req_offset_bytes, *len_bytes as usize) };
                let offset = self.slot_offset_bytes(*slot) + *page_offset_bytes as u64;
                read_aligned(cache.dev.as_ref(), dst, offset, &mut scratch.bounce).map_err(on_cache)
            }
            IoCommand::ReadBacking {
                volume,
                offset_bytes,
                len_bytes,
                req_offset_bytes,
                ..
            } => {
                // SAFETY: as for ReadPage.
                let dst = unsafe { job.buf.slice_mut(*req_offset_bytes, *len_bytes as usize) };
                let b = self.backing(*volume);
                read_aligned(b.dev.as_ref(), dst, *offset_bytes, &mut scratch.bounce)
                    .map_err(on_backing)
            }
            IoCommand::WriteBacking {
                volume,
                offset_bytes,
                len_bytes,
                src,
                ..
            } => {
                let b = self.backing(*volume);
                match *src {
                    Source::Request {
                        offset_bytes: from, ..
                    } => {
                        // SAFETY: the request is in flight (module header).
                        let data = unsafe { job.buf.slice(from, *len_bytes as usize) };
                        write_aligned(b.dev.as_ref(), data, *offset_bytes, &mut scratch.bounce)
                            .map_err(on_backing)?;
                    }
                    Source::Zero => {
                        write_zeros(b.dev.as_ref(), *offset_bytes, *len_bytes, &mut scratch.page)
                            .map_err(on_backing)?
                    }
                }
                // FUA or not: every completed backing write is durable (contract).
                self.make_durable(b, false).map_err(on_backing)
            }
            IoCommand::Stage {
                volume,
                slots,
                journal_page,
                ..
            } => {
                let b = self.backing(*volume);
                let journal = b.dev.journal().ok_or_else(|| on_backing(no_journal(b)))?;
                let Some(at) = journal_page else {
                    return Err(on_backing(no_journal(b)));
                };
                let run = scratch.page.get(slots.len() * p as usize);
                self.read_slots(slots, run).map_err(on_cache)?;
                journal.stage(*at, run).map_err(on_backing)
            }
            IoCommand::Commit {
                volume,
                txn,
                pages,
                apply,
                ..
            } => {
                let b = self.backing(*volume);
                let journal = b.dev.journal().filter(|_| !apply);
                let journal = journal.ok_or_else(|| on_backing(no_journal(b)))?;
                let homes: Vec<u64> = pages.iter().map(|p| p.0).collect();
                journal.commit(*txn, &homes).map_err(on_backing)
            }
            IoCommand::Retire { volume, txn, .. } => {
                let b = self.backing(*volume);
                let journal = b.dev.journal().ok_or_else(|| on_backing(no_journal(b)))?;
                journal.retire(*txn).map_err(on_backing)
            }
            IoCommand::Destage {
                volume,
                first_page,
                slots,
                ..
            } => {
                let b = self.backing(*volume);
                let run = scratch.page.get(slots.len() * p as usize);
                self.read_slots(slots, run).map_err(on_cache)?;
                let start = first_page.0 * p;
                let len = b
                    .dev
                    .len_bytes()
                    .saturating_sub(start)
                    .min(run.len() as u64) as usize;
                write_aligned(b.dev.as_ref(), &run[..len], start, &mut scratch.bounce)
                    .map_err(on_backing)?;
                self.make_durable(b, false).map_err(on_backing)
            }
        }
    }

    fn timer_thread(&self) {
        let mut core = self.lock_core();
        loop {
            if core.stopping {
                return;
            }
            core.timer_armed = None;
            match core.engine.poll_timeout() {
                Some(at) => {
                    let now = self.now();
                    if now >= at {
                        core.engine.handle_timeout(now);
                        let mut jobs = VecDeque::new();
                        self.pump(&mut core, &mut jobs);
                        drop(core);
                        self.to_pool(jobs.into_iter());
                        core = self.lock_core();
                    } else {
                        let wait = Duration::from_nanos(at.0 - now.0);
                        core.timer_armed = Some(at);
                        core = self
                            .timer
                            .wait_timeout(core, wait)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                }
                None => {
                    // Armed at "never": any deadline is earlier and wakes us.
                    core.timer_armed = Some(Nanos::MAX);
                    core = self.timer.wait(core).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

/// A page write whose whole page comes from its request's buffer.
/// The request whose buffer a command reads or fills, if any (a batch's
/// pages name theirs each).
fn command_request(cmd: &IoCommand) -> Option<RequestId> {
    match cmd {
        IoCommand::ReadPage { req, .. } | IoCommand::ReadBacking { req, .. } => Some(*req),
        IoCommand::WritePage { patch, .. } => match patch.src {
            Source::Request { req, .. } => Some(req),
            Source::Zero => None,
        },
        IoCommand::WritePages { src, .. } => match src {
            Source::Request { req, .. } => Some(*req),
            Source::Zero => None,
        },
        IoCommand::WriteBacking { src, .. } => match src {
            Source::Request { req, .. } => Some(*req),
            Source::Zero => None,
        },
        IoCommand::Destage { .. }
        | IoCommand::FreeSlots { .. }
        | IoCommand::Stage { .. }
        | IoCommand::Commit { .. }
        | IoCommand::Retire { .. }
        | IoCommand::WriteBatch { .. }
        | IoCommand::AdvanceLog { .. }
        | IoCommand::LogCheckpoint { .. } => None,
    }
}

fn is_whole_request_page(job: &Job, page_size_bytes: u64) -> bool {
    matches!(
        &job.cmd,
        IoCommand::WritePage { patch, .. }
            if patch.page_offset_bytes == 0
                && u64::from(patch.len_bytes) == page_size_bytes
                && matches!(patch.src, Source::Request { .. })
    )
}

fn is_page_write(job: &Job) -> bool {
    matches!(job.cmd, IoCommand::WritePage { .. })
}

/// Commands that run in write batches (one durability barrier for all).
fn is_batched(job: &Job) -> bool {
    matches!(
        job.cmd,
        IoCommand::WritePage { .. } | IoCommand::FreeSlots { .. }
    )
}
