//! Writes held in memory until an fsync or writeback sends them to the
//! cache, as a kernel's page cache holds dirty pages: a `write(2)` that no
//! one waits for costs a copy, and a page reaches the engine either from
//! the fsync that waits for it (with that caller as issuer, sync) or from
//! background writeback (no issuer, not sync): the writes request-oriented
//! admission classifies (Kim et al. §3.1, where the kernel's page cache
//! sits above the cache in the same way).
//! It must never let an older version of a page land after a newer one
//! (one writeback of a page in flight at a time), never forget a dirty
//! page that did not land, and never hold more than its limit (writers
//! wait for writeback).

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::volumes::Volumes;
use fuser::Errno;
use wcache_core::RequestFlags;

use crate::data::{flush_file, write_together};
use crate::files::BackingFile;

/// How much is held, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct DirtyLimits {
    /// Bytes held at most (dirty or being written back); a writer waits
    /// above it. Half of it starts background writeback. 0: nothing is
    /// held (every write goes to the cache at once, sync, as its caller's).
    pub max_bytes: u64,
    /// A file's pages dirty this long are written back.
    pub expire: Duration,
}

impl Default for DirtyLimits {
    /// Linux's defaults scaled to a mount: 30 s before writeback.
    fn default() -> DirtyLimits {
        DirtyLimits {
            max_bytes: 256 << 20,
            expire: Duration::from_secs(30),
        }
    }
}

/// Background writeback threads (writes in flight to the backing at once).
const WRITEBACK_THREADS: usize = 4;
/// The longest write one writeback sends (contiguous pages of one file).
const EXTENT_MAX_BYTES: u64 = 1 << 20;
/// The most one background writeback takes from a file before another
/// file's turn.
const BATCH_MAX_BYTES: u64 = 4 << 20;
/// The most one flight of an fsync's writeback sends at once (it waits for
/// each): a criticality its caller gains meanwhile (lent while a critical
/// process waits on the file's inode lock: `kernel_locks.rs`) reaches the
/// rest of its pages.
const FSYNC_FLIGHT_MAX_BYTES: u64 = 4 << 20;
/// A background writeback sends its extents in parts of about this many
/// bytes, and gives the rest of its pages back when an fsync of the file
/// began meanwhile: that fsync waits for them, and sends them itself with
/// its caller (whose criticality, lent or its own, caches them) instead of
/// waiting behind the disk for writes nobody else waits for.
const BACKGROUND_PART_BYTES: usize = 64 << 10;
/// An fsync's writeback this long is logged (debug).
const SLOW_WRITEBACK: Duration = Duration::from_millis(100);
/// The writeback threads look at expiry this often (Linux: 5 s), or at
/// the expiry time if it is shorter.
const WRITEBACK_INTERVAL: Duration = Duration::from_secs(5);

/// What one fsync's writeback did, for its debug record when slow.
#[derive(Default)]
struct SyncTrace {
    /// Its own flights, their pages and time.
    flights: u64,
    pages: u64,
    flights_ns: u64,
    /// FLUSHes sent to promote others' writebacks of the file, and the
    /// time spent waiting for those to land.
    promotions: u64,
    waits_ns: u64,
}

/// A page held.
struct Held {
    data: Box<[u8]>,
    /// The first write (a file's sequence number) not yet in a writeback
    /// that started: None when nothing was written since.
    since: Option<u64>,
    /// A writeback in flight holds the writes from this one (and before).
    flight: Option<u64>,
}

/// The pages held of one file (its window of the volume).
struct FilePages {
    file: Arc<BackingFile>,
    pages: BTreeMap<u64, Held>,
    /// Sequence number of the file's last write held.
    seq: u64,
    /// Pages dirty and not in a writeback that started.
    dirty: usize,
    /// When `dirty` last went from 0 (the kernel's `dirtied_when`).
    dirtied: Instant,
    /// A background writeback failed: the next fsync reports it.
    error: Option<Errno>,
    /// Fsyncs of the file under way: background writeback leaves the file
    /// to them (their writes carry their caller, and its criticality).
    syncing: u32,
}

impl FilePages {
    /// Page `p` of a flight that did not land (failed, or never sent): no
    /// longer in flight, dirty again from `since`, the first write the
    /// flight held.
    fn not_landed(&mut self, p: u64, since: u64) {
        let Some(held) = self.pages.get_mut(&p) else {
            return;
        };
        held.flight = None;
        if held.since.is_none() {
            if self.dirty == 0 {
                self.dirtied = Instant::now();
            }
            self.dirty += 1;
        }
        held.since = Some(since);
    }
}

struct State {
    /// By the window's first byte in the volume.
    files: HashMap<u64, FilePages>,
    /// Bytes of pages held (dirty or in flight).
    bytes: u64,
    stop: bool,
    /// The last background writeback failed (none has landed since).
    failing: Option<Errno>,
    /// Writers that waited for room (`throttle`), and for how long in all.
    throttled: u64,
    throttled_ns: u64,
}

/// Pages of one file on their way to the engine.
struct Flight {
    window: u64,
    file: Arc<BackingFile>,
    /// Contiguous runs: first page, their bytes.
    extents: Vec<(u64, Vec<u8>)>,
    /// Every page, and the first write its flight holds.
    pages: Vec<(u64, u64)>,
}

/// The mount's held writes (`Data` puts, reads through and writes back).
pub struct DirtyPages {
    volumes: Arc<Volumes>,
    page: u64,
    limits: DirtyLimits,
    state: Mutex<State>,
    /// A writeback ended (fsyncs, truncations and throttled writers wait).
    changed: Condvar,
    /// Work for the writeback threads.
    work: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl DirtyPages {
    /// Holds writes under `limits`, with writeback threads (none when
    /// `limits.max_bytes` is 0: nothing is held).
    pub fn start(volumes: Arc<Volumes>, page: u64, limits: DirtyLimits) -> Arc<DirtyPages> {
        let dirty = Arc::new(DirtyPages {
            volumes,
            page,
            limits,
            state: Mutex::new(State {
                files: HashMap::new(),
                bytes: 0,
                stop: limits.max_bytes == 0,
                failing: None,
                throttled: 0,
                throttled_ns: 0,
            }),
            changed: Condvar::new(),
            work: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        });
        if limits.max_bytes > 0 {
            let mut threads = dirty.threads.lock().unwrap_or_else(|e| e.into_inner());
            for i in 0..WRITEBACK_THREADS {
                let d = Arc::clone(&dirty);
                let spawned = std::thread::Builder::new()
                    .name(format!("wcache-writeback-{i}"))
                    .spawn(move || d.writeback_loop());
                match spawned {
                    Ok(handle) => threads.push(handle),
                    Err(e) => tracing::warn!("writeback thread {i}: {e}"),
                }
            }
        }
        dirty
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes are held (not stopped, not off).
    pub fn holds(&self) -> bool {
        !self.lock().stop
    }

    /// Bytes held now (dirty or being written back).
    pub fn held_bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// A writer about to hold more waits while the limit is reached (the
    /// kernel's `balance_dirty_pages`), having woken the writeback; while
    /// the writeback fails, a writer over the limit gets its error instead
    /// of waiting for room that cannot come (nothing held is dropped).
    pub fn throttle(&self) -> Result<(), Errno> {
        let mut st = self.lock();
        let mut since = None;
        let mut result = Ok(());
        while st.bytes >= self.limits.max_bytes && !st.stop {
            if let Some(e) = st.failing {
                result = Err(e);
                break;
            }
            since.get_or_insert_with(Instant::now);
            self.work.notify_all();
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(since) = since {
            st.throttled += 1;
            st.throttled_ns += since.elapsed().as_nanos() as u64;
        }
        result
    }

    /// The held writes' gauges and counters, for `wcache stats` and the
    /// metrics (a writer that waits here waits for writeback, which under
    /// request-oriented admission may bypass to the backing).
    pub fn metrics(&self) -> Vec<wcache_io::ops::Metric> {
        let st = self.lock();
        let metric = |name: &str, kind: &str, help: &str, value| wcache_io::ops::Metric {
            name: name.to_string(),
            kind: kind.to_string(),
            help: help.to_string(),
            value,
        };
        vec![
            metric(
                "mount_held_bytes",
                "gauge",
                "Bytes of write(2)s held in the mount's memory (dirty or being written back)",
                st.bytes,
            ),
            metric(
                "mount_held_limit_bytes",
                "gauge",
                "The most the mount holds (--dirty-max); a writer waits above it",
                self.limits.max_bytes,
            ),
            metric(
                "mount_throttled_writes",
                "counter",
                "write(2)s that waited for the held writes to shrink below --dirty-max",
                st.throttled,
            ),
            metric(
                "mount_throttle_ns_total",
                "counter",
                "Time write(2)s waited for the held writes to shrink below --dirty-max",
                st.throttled_ns,
            ),
        ]
    }

    /// A copy of page `p` of the file at `window`, if held.
    pub fn page(&self, window: u64, p: u64) -> Option<Vec<u8>> {
        let st = self.lock();
        let held = st.files.get(&window)?.pages.get(&p)?;
        Some(held.data.to_vec())
    }

    /// Copies of the held pages in `pages` of the file at `window`. A page
    /// not among them is in the engine (a page leaves only once its
    /// writeback landed), so a reader takes these first, then the engine.
    pub fn snapshot(&self, window: u64, pages: RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
        let st = self.lock();
        let Some(fp) = st.files.get(&window) else {
            return Vec::new();
        };
        fp.pages
            .range(pages)
            .map(|(p, h)| (*p, h.data.to_vec()))
            .collect()
    }

    /// Holds whole pages `bytes` from page `first` of `file` (at `window`).
    /// False when writes are no longer held (stopping, or off) and none of
    /// these pages is: the caller writes them to the engine itself (a page
    /// still held takes the write, so no older version lands after it).
    pub fn put(&self, file: &Arc<BackingFile>, window: u64, first: u64, bytes: &[u8]) -> bool {
        let page = self.page as usize;
        debug_assert!(bytes.len().is_multiple_of(page));
        let mut st = self.lock();
        let last = first + (bytes.len() / page) as u64 - 1;
        let any_held = || {
            st.files
                .get(&window)
                .is_some_and(|fp| fp.pages.range(first..=last).next().is_some())
        };
        if st.stop && !any_held() {
            return false;
        }
        let st = &mut *st;
        let fp = st.files.entry(window).or_insert_with(|| FilePages {
            file: Arc::clone(file),
            pages: BTreeMap::new(),
            seq: 0,
            dirty: 0,
            dirtied: Instant::now(),
            error: None,
            syncing: 0,
        });
        for (i, chunk) in bytes.chunks(page).enumerate() {
            fp.seq += 1;
            let seq = fp.seq;
            let p = first + i as u64;
            let held = fp.pages.entry(p).or_insert_with(|| {
                st.bytes += page as u64;
                Held {
                    data: vec![0; page].into_boxed_slice(),
                    since: None,
                    flight: None,
                }
            });
            held.data.copy_from_slice(chunk);
            if held.since.is_none() {
                held.since = Some(seq);
                if fp.dirty == 0 {
                    fp.dirtied = Instant::now();
                }
                fp.dirty += 1;
            }
        }
        if st.bytes > self.limits.max_bytes / 2 {
            self.work.notify_one();
        }
        true
    }

    /// Sends to the engine, with `flags`, the pages in `pages` (all with
    /// None) of the file at `window` written before this call, and waits
    /// for those another writeback has in flight: an fsync (the caller's
    /// flags), or an O_SYNC/O_DSYNC write (FUA). A wait for another's
    /// writeback first sends a FLUSH with `flags`, through which a critical
    /// caller's wait promotes it (I/O criticality inheritance). A failed
    /// background writeback of the file is reported here, once. `rider`
    /// goes with the last pages sent (`run`); it is returned when there
    /// were none, for the caller to send alone.
    pub fn write_back(
        &self,
        window: u64,
        pages: Option<RangeInclusive<u64>>,
        flags: RequestFlags,
        rider: Option<(u64, Vec<u8>)>,
    ) -> Result<Option<(u64, Vec<u8>)>, Errno> {
        let syncing = |st: &mut State, up: bool| {
            if let Some(fp) = st.files.get_mut(&window) {
                fp.syncing = if up {
                    fp.syncing + 1
                } else {
                    fp.syncing.saturating_sub(1)
                };
            }
        };
        syncing(&mut self.lock(), true);
        let started = Instant::now();
        let mut trace = SyncTrace::default();
        let result = self.write_back_syncing(window, pages, flags, rider, &mut trace);
        syncing(&mut self.lock(), false);
        if started.elapsed() >= SLOW_WRITEBACK {
            tracing::debug!(
                window,
                issuer = flags.issuer,
                ms = started.elapsed().as_millis() as u64,
                flights = trace.flights,
                pages = trace.pages,
                flights_ms = trace.flights_ns / 1_000_000,
                promotions = trace.promotions,
                waits_ms = trace.waits_ns / 1_000_000,
                critical_at_end = self.volumes.engine().issuer_is_critical(flags.issuer),
                "a slow fsync writeback"
            );
        }
        result
    }

    fn write_back_syncing(
        &self,
        window: u64,
        pages: Option<RangeInclusive<u64>>,
        flags: RequestFlags,
        mut rider: Option<(u64, Vec<u8>)>,
        trace: &mut SyncTrace,
    ) -> Result<Option<(u64, Vec<u8>)>, Errno> {
        let range = pages.unwrap_or(0..=u64::MAX);
        // The FLUSH that promotes others' writebacks of the file went, and
        // whether as a critical caller's (criticality may be lent meanwhile).
        let mut promoted: Option<bool> = None;
        let mut st = self.lock();
        let Some(target) = st.files.get(&window).map(|fp| fp.seq) else {
            return Ok(rider);
        };
        loop {
            let Some(fp) = st.files.get_mut(&window) else {
                return Ok(rider);
            };
            let due = |h: &Held| h.since.is_some_and(|s| s <= target);
            if let Some(flight) = self.take(window, fp, &range, FSYNC_FLIGHT_MAX_BYTES, due) {
                // The size record rides with the last flight, durable
                // with the last of the pages.
                let last =
                    !(fp.pages.range(range.clone())).any(|(_, h)| h.flight.is_none() && due(h));
                let rides = if last { rider.take() } else { None };
                drop(st);
                let at = Instant::now();
                trace.flights += 1;
                trace.pages += flight.pages.len() as u64;
                let ran = self.run(flight, flags, false, rides);
                trace.flights_ns += at.elapsed().as_nanos() as u64;
                ran?;
                st = self.lock();
                continue;
            }
            let waiting = fp
                .pages
                .range(range.clone())
                .any(|(_, h)| h.flight.is_some_and(|s| s <= target));
            if !waiting {
                return fp.error.take().map_or(Ok(rider), Err);
            }
            let critical = flags.critical
                || (flags.issuer != 0 && self.volumes.engine().issuer_is_critical(flags.issuer));
            if promoted.is_none_or(|as_critical| critical && !as_critical) {
                promoted = Some(critical);
                trace.promotions += 1;
                drop(st);
                flush_file(
                    self.volumes.of(window),
                    window,
                    RequestFlags { critical, ..flags },
                )?;
                st = self.lock();
                continue;
            }
            let at = Instant::now();
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            trace.waits_ns += at.elapsed().as_nanos() as u64;
        }
    }

    /// A truncation of the file at `window`: waits for the writebacks in
    /// flight of pages from `from` on (they must land before the cut), then
    /// forgets the pages from `drop_from` on.
    pub fn truncate(&self, window: u64, from: u64, drop_from: u64) {
        let mut st = self.lock();
        loop {
            let Some(fp) = st.files.get(&window) else {
                return;
            };
            if !fp.pages.range(from..).any(|(_, h)| h.flight.is_some()) {
                break;
            }
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let st = &mut *st;
        let Some(fp) = st.files.get_mut(&window) else {
            return;
        };
        let gone = fp.pages.split_off(&drop_from);
        for held in gone.values() {
            st.bytes -= self.page;
            if held.since.is_some() {
                fp.dirty -= 1;
            }
        }
        if fp.pages.is_empty() {
            st.files.remove(&window);
        }
    }

    /// Starts a writeback of the pages of `fp` in `range` that `due` picks
    /// and none has in flight, up to `max_bytes`: marks them in flight and
    /// copies them, in contiguous runs. None when there is none.
    fn take(
        &self,
        window: u64,
        fp: &mut FilePages,
        range: &RangeInclusive<u64>,
        max_bytes: u64,
        due: impl Fn(&Held) -> bool,
    ) -> Option<Flight> {
        let mut flight = Flight {
            window,
            file: Arc::clone(&fp.file),
            extents: Vec::new(),
            pages: Vec::new(),
        };
        let mut taken = 0u64;
        for (p, held) in fp.pages.range_mut(range.clone()) {
            if taken >= max_bytes {
                break;
            }
            if held.flight.is_some() || !due(held) {
                continue;
            }
            let since = held.since.take().unwrap_or(0);
            held.flight = Some(since);
            fp.dirty -= 1;
            taken += self.page;
            flight.pages.push((*p, since));
            match flight.extents.last_mut() {
                Some((first, bytes))
                    if *first + bytes.len() as u64 / self.page == *p
                        && (bytes.len() as u64) < EXTENT_MAX_BYTES =>
                {
                    bytes.extend_from_slice(&held.data)
                }
                _ => flight.extents.push((*p, held.data.to_vec())),
            }
        }
        (!flight.pages.is_empty()).then_some(flight)
    }

    /// Writes a flight to the engine with `flags`, its extents and then
    /// `rider` (a write the caller wants with them: a file's size record)
    /// started together, so that they share the cache's log batch and its
    /// barrier; then ends the flight. A failure is kept for the file's next
    /// fsync with `keep_error` (background). The error of the flight, else
    /// of the rider.
    fn run(
        &self,
        mut flight: Flight,
        flags: RequestFlags,
        keep_error: bool,
        rider: Option<(u64, Vec<u8>)>,
    ) -> Result<(), Errno> {
        let mut writes = Vec::with_capacity(flight.extents.len() + 1);
        for (first, bytes) in std::mem::take(&mut flight.extents) {
            let at = first * self.page;
            let end = at + bytes.len() as u64;
            flight.file.cached_end.fetch_max(end, Ordering::AcqRel);
            writes.push((flight.window + at, bytes));
        }
        let rides = rider.is_some();
        writes.extend(rider);
        let mut results = write_together(self.volumes.of(flight.window), writes, flags);
        let rider_result = match rides {
            true => results.pop().expect("the rider's result"),
            false => Ok(()),
        };
        let result = results.into_iter().collect::<Result<(), Errno>>();
        self.land(&flight, result, keep_error);
        result.and(rider_result)
    }

    /// A flight ended: its pages leave unless written again meanwhile; on
    /// failure they are dirty again (and the next fsync hears of it).
    fn land(&self, flight: &Flight, result: Result<(), Errno>, keep_error: bool) {
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(fp) = st.files.get_mut(&flight.window) {
            for (p, since) in &flight.pages {
                if result.is_err() {
                    fp.not_landed(*p, *since);
                    continue;
                }
                let Some(held) = fp.pages.get_mut(p) else {
                    continue;
                };
                held.flight = None;
                if held.since.is_none() {
                    fp.pages.remove(p);
                    st.bytes -= self.page;
                }
            }
            if let (Err(e), true) = (result, keep_error) {
                fp.error = Some(e);
            }
            if fp.pages.is_empty() {
                st.files.remove(&flight.window);
            }
        }
        st.failing = result.err();
        self.changed.notify_all();
    }

    /// The next background writeback: above half the limit, the file
    /// dirty longest; otherwise a file dirty longer than `expire`; with
    /// `all` (a stop), any file.
    fn next_flight(&self, st: &mut State, all: bool) -> Option<Flight> {
        let now = Instant::now();
        let over = st.bytes > self.limits.max_bytes / 2;
        let window = st
            .files
            .iter()
            .filter(|(_, fp)| fp.dirty > 0 && (all || fp.syncing == 0))
            .filter(|(_, fp)| all || over || now.duration_since(fp.dirtied) >= self.limits.expire)
            .min_by_key(|(_, fp)| fp.dirtied)
            .map(|(w, _)| *w)?;
        let fp = st.files.get_mut(&window)?;
        // What stays dirty goes next (in page order, good for a disk).
        self.take(window, fp, &(0..=u64::MAX), BATCH_MAX_BYTES, |h| {
            h.since.is_some()
        })
    }

    /// A writeback thread: background writebacks (no issuer, not sync)
    /// until the stop.
    fn writeback_loop(&self) {
        let background = RequestFlags::default();
        loop {
            let flight = {
                let mut st = self.lock();
                loop {
                    if st.stop {
                        return;
                    }
                    if let Some(f) = self.next_flight(&mut st, false) {
                        break f;
                    }
                    let interval = WRITEBACK_INTERVAL.min(self.limits.expire);
                    st = self
                        .work
                        .wait_timeout(st, interval)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            if let Err(e) = self.run_background(flight, background) {
                tracing::warn!("background writeback: {e:?} (the pages stay held; retried)");
                std::thread::sleep(WRITEBACK_INTERVAL.min(self.limits.expire));
            }
        }
    }

    /// A background writeback, in parts (`BACKGROUND_PART_BYTES`): once
    /// an fsync of the file is under way, the pages not yet sent go back to
    /// it, dirty as before (also after a failure).
    fn run_background(&self, mut flight: Flight, flags: RequestFlags) -> Result<(), Errno> {
        let mut extents = std::mem::take(&mut flight.extents).into_iter().peekable();
        let mut pages = std::mem::take(&mut flight.pages);
        while extents.peek().is_some() {
            let mut part = Vec::new();
            let mut bytes = 0;
            while let Some(e) =
                extents.next_if(|e| part.is_empty() || bytes + e.1.len() <= BACKGROUND_PART_BYTES)
            {
                bytes += e.1.len();
                part.push(e);
            }
            let rest = pages.split_off(bytes / self.page as usize);
            let sub = Flight {
                window: flight.window,
                file: Arc::clone(&flight.file),
                extents: part,
                pages: std::mem::replace(&mut pages, rest),
            };
            let result = self.run(sub, flags, true, None);
            let syncing = || {
                self.lock()
                    .files
                    .get(&flight.window)
                    .is_some_and(|fp| fp.syncing > 0)
            };
            if result.is_err() || (!pages.is_empty() && syncing()) {
                self.give_back(flight.window, &pages);
                return result;
            }
        }
        Ok(())
    }

    /// Pages of a flight that were not sent: dirty again, from the first
    /// write the flight held, and no longer in flight.
    fn give_back(&self, window: u64, pages: &[(u64, u64)]) {
        let mut st = self.lock();
        if let Some(fp) = st.files.get_mut(&window) {
            for (p, since) in pages {
                debug_assert!(
                    fp.pages.get(p).is_none_or(|h| h.flight.is_some()),
                    "a page given back was in flight"
                );
                fp.not_landed(*p, *since);
            }
        }
        self.changed.notify_all();
    }

    /// Stops holding: every held page written back (from this thread), the
    /// writeback threads ended. Returns the bytes that could not be
    /// written back (lost with the process: they were never fsynced).
    pub fn stop(&self) -> u64 {
        let background = RequestFlags::default();
        let mut failures = 0;
        loop {
            let mut st = self.lock();
            st.stop = true;
            if let Some(flight) = self.next_flight(&mut st, true) {
                drop(st);
                if self.run(flight, background, true, None).is_err() {
                    failures += 1;
                    if failures > 3 {
                        break;
                    }
                }
                continue;
            }
            if !st
                .files
                .values()
                .any(|fp| fp.pages.values().any(|h| h.flight.is_some()))
            {
                break;
            }
            drop(self.changed.wait(st).unwrap_or_else(|e| e.into_inner()));
        }
        self.work.notify_all();
        self.changed.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests;
