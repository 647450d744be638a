//! The event-driven data path: the page writes of a `write_async` request
//! and their record blocks go to io_uring from the thread that handles the
//! request (no handoff, no sleep in a device call), and one thread reaps the
//! completions in batches, completes the engine's commands under one lock
//! and answers the requests. It must never complete a command before its
//! page data and record are durable under the cache device's contract
//! (`RWF_DSYNC` on each write, or a group-committed `IORING_OP_FSYNC` that
//! was submitted after every write of the batch had completed).
//!
//! Record blocks keep the store's group commit (`store.rs`): at most one
//! write of a block is in flight, by this path or by a thread; a batch
//! waiting for a block is registered here and its write is started when
//! the running one ends (`CacheStore::set_write_ended_hook` tells the ends
//! of the threads' writes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use wcache_core::types::SlotIndex;
use wcache_core::{IoCommand, IoError};

use super::batch::{batch_slot, whole_page};
use super::{DataPath, DriverConfig, Job, Shared};
use crate::device::{
    is_aligned, AlignedBuf, BlockDevice, DeviceError, UringTarget, DIRECT_ALIGNMENT_BYTES,
    DIRECT_MIN_BYTES,
};
use crate::store::{BlockWrite, CacheStore, Commit, Staged};

/// Submission queue entries; a full queue is submitted and refilled.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries (the kernel keeps overflow: `FEAT_NODROP`).
const CQ_ENTRIES: u32 = 8192;
/// `io_uring_enter` flag: wait for completions.
const ENTER_GETEVENTS: u32 = 1;
/// The reaping thread waits for up to a quarter of the writes in flight
/// (at most this many) for at most `REAP_WAIT_US`, then for any one: fewer
/// wake-ups, and replies sent together, when many are in flight.
const REAP_BATCH_MAX: u32 = 16;
const REAP_WAIT_US: u32 = 50;

/// `user_data`: kind in the top bits, then the op index and the run.
const KIND_SHIFT: u32 = 60;
const KIND_DATA: u64 = 1;
const KIND_BLOCK: u64 = 2;
const KIND_FSYNC: u64 = 3;
const KIND_WAKE: u64 = 4;
const OP_SHIFT: u32 = 16;
const RUN_MASK: u64 = (1 << OP_SHIFT) - 1;
const _: () = assert!(super::WRITE_BATCH_MAX as u64 <= RUN_MASK);

pub(super) struct Uring {
    ring: IoUring,
    target: UringTarget,
    state: Mutex<State>,
    /// Entries were held back (`submit`) and not yet sent (`submit_held`).
    held: AtomicBool,
    /// Writes and syncs submitted and not yet completed.
    in_flight: AtomicU32,
}

#[derive(Default)]
struct State {
    ops: Vec<Option<Op>>,
    free_ops: Vec<u32>,
    /// Per record block, the ops waiting for it: (op, target generation).
    waits: HashMap<u32, Vec<(u32, u64)>>,
    /// Record block writes in flight.
    writes: HashMap<u32, BlockWrite>,
    snapshots: Vec<AlignedBuf>,
    bounces: Vec<AlignedBuf>,
    /// Ops whose writes (or record waits) are all done.
    ready: Vec<u32>,
    /// Ops waiting for the next `fdatasync`, and those the running one covers.
    barrier_waiting: Vec<u32>,
    barrier_running: Vec<u32>,
    fsync_in_flight: bool,
    /// Entries pushed and not yet submitted.
    unsubmitted: bool,
    stopping: bool,
}

/// One batch of page writes in flight.
struct Op {
    jobs: Vec<Job>,
    results: Vec<Result<(), IoError>>,
    /// Data writes and record blocks not yet done.
    pending: u32,
    /// Job indices by slot, and the data writes as runs of them.
    whole: Vec<u32>,
    runs: Vec<(u32, u32)>,
    /// The page data copied, when the request buffers are not aligned.
    bounce: Option<AlignedBuf>,
    needs_barrier: bool,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Writing,
    /// Zeroing again the records of pages whose data write failed.
    Unstaging,
    Barrier,
}

/// Whether a write goes to io_uring: there is one and it takes the write
/// (`Uring::takes`).
pub(super) fn takes(uring: Option<&Uring>, len: usize, fua: bool, persist_on_flush: bool) -> bool {
    uring.is_some_and(|u| u.takes(len, fua, persist_on_flush))
}

impl Uring {
    /// The data path for a cache device: io_uring when asked for, the cache
    /// is persistent, the device offers it, and the kernel sets up a ring.
    pub(super) fn choose(
        cache: &Arc<dyn BlockDevice>,
        persistent: bool,
        log: bool,
        config: &DriverConfig,
    ) -> (Option<Uring>, DataPath) {
        let threads = |why: &str| {
            (
                None,
                DataPath::Threads {
                    why: why.to_string(),
                },
            )
        };
        if !config.io_uring {
            return threads("io_uring turned off");
        }
        if log {
            return threads("format 3: each batch is written with one write by a driver thread");
        }
        if !persistent {
            return threads("io_uring serves persistent caches only");
        }
        let Some(target) = cache.uring_target() else {
            return threads("the cache device is memory-like or not a file: io_uring not used");
        };
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES);
        match ring {
            Ok(ring) if ring.params().is_feature_nodrop() => (
                Some(Uring {
                    ring,
                    target,
                    state: Mutex::new(State::default()),
                    held: AtomicBool::new(false),
                    in_flight: AtomicU32::new(0),
                }),
                DataPath::IoUring,
            ),
            Ok(_) => threads("io_uring unavailable: the kernel lacks IORING_FEAT_NODROP"),
            Err(e) => threads(&format!("io_uring unavailable: {e}")),
        }
    }

    /// Whether a write of `len_bytes` goes this way. Not a FUA write under
    /// persist-on-flush (written and flushed by its thread), nor a small write to
    /// a buffered cache file under persist-on-flush: io_uring hands it to
    /// a kernel worker thread, a wake-up and a switch per write, where the
    /// request's thread writes it into the page cache itself with no wait
    /// (nothing waits for the medium until a FLUSH). Measured 2026-11-27,
    /// 1 GiB cache file on ext4, fio nbd: io_uring / the thread's own
    /// write, 4 KiB QD1 16.8 / 36.0 K IOPS, QD32 72.6 / 107.5 K (server CPU
    /// 16.3 / 8.8 µs per request); 1 MiB writes keep io_uring (2,571 /
    /// 1,611 MiB/s: they go O_DIRECT, `DIRECT_MIN_BYTES`), and so does
    /// persist-on-write, whose barrier overlaps the next writes (4 KiB
    /// QD32 44.8 / 24.3 K IOPS).
    fn takes(&self, len_bytes: usize, fua: bool, persist_on_flush: bool) -> bool {
        let small_buffered = self.target.buffered && len_bytes < DIRECT_MIN_BYTES;
        !(persist_on_flush && (fua || small_buffered))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets the store tell this path when a thread's write of a record
    /// block ended (then the batches waiting for the block go on).
    pub(super) fn watch_store(shared: &Arc<Shared>) {
        let Some(store) = &shared.store else {
            return;
        };
        let weak: Weak<Shared> = Arc::downgrade(shared);
        store.set_write_ended_hook(Box::new(move |block| {
            if let Some(s) = weak.upgrade() {
                if let Some(u) = &s.uring {
                    u.thread_write_ended(&s, block);
                }
            }
        }));
    }

    fn thread_write_ended(&self, shared: &Shared, block: u32) {
        let mut st = self.lock();
        if !st.waits.contains_key(&block) {
            return;
        }
        let ready_before = st.ready.len();
        self.resolve_block(&mut st, shared, block);
        if st.ready.len() > ready_before {
            // The reaping thread completes them.
            self.wake(&mut st);
        }
        self.flush_sq(&mut st);
    }

    /// Sends a batch of whole-page writes from requests (`is_whole_request_page`):
    /// checksums, records staged, then the data runs and the record blocks
    /// no one is writing, all in one submission.
    /// The entries wait in the submission queue for `submit_held` (the end
    /// of the `DriverBatch` that started them) or the next submission, so
    /// that a burst of requests costs one `io_uring_enter` and one device
    /// notification.
    pub(super) fn submit(&self, shared: &Shared, jobs: Vec<Job>) {
        let store = shared
            .store
            .as_ref()
            .expect("the io_uring path needs a store");
        let p = shared.page_size_bytes;
        let n = jobs.len();
        let mut whole: Vec<u32> = (0..n as u32).collect();
        whole.sort_unstable_by_key(|&i| batch_slot(&jobs, i));
        let mut records = Vec::with_capacity(n);
        let mut needs_barrier = false;
        for job in &jobs {
            let (record, barrier) = shared.batch_needs(&job.cmd);
            let Some((slot, record)) = record else {
                unreachable!("io_uring batches hold page writes only");
            };
            // SAFETY: the request is in flight (driver.rs, module header).
            let crc = crate::checksum::crc32c(unsafe { whole_page(job, p) });
            records.push((slot, record, crc));
            needs_barrier |= barrier;
        }
        let (mut order, mut staged) = (Vec::new(), Vec::new());
        store.stage_records(&records, &mut order, &mut staged);
        // Runs: consecutive slots whose pages are contiguous in memory.
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for k in 0..n {
            let extends = runs.last().is_some_and(|&(first, count)| {
                let prev = whole[(first + count - 1) as usize];
                let cur = whole[k];
                // SAFETY: as above.
                let (a, b) = unsafe {
                    (
                        whole_page(&jobs[prev as usize], p),
                        whole_page(&jobs[cur as usize], p),
                    )
                };
                batch_slot(&jobs, cur) == batch_slot(&jobs, prev) + 1
                    && b.as_ptr() as usize == a.as_ptr() as usize + p as usize
            });
            match runs.last_mut() {
                Some((_, count)) if extends => *count += 1,
                _ => runs.push((k as u32, 1)),
            }
        }
        let align = store.device().alignment_bytes();
        let misaligned = align > 1
            && whole.iter().any(|&i| {
                // SAFETY: as above.
                let page = unsafe { whole_page(&jobs[i as usize], p) };
                !(page.as_ptr() as usize).is_multiple_of(align)
            });
        let mut st = self.lock();
        let bounce = misaligned.then(|| {
            // O_DIRECT and buffers that are not aligned: one copy of the pages.
            let mut buf = st.bounces.pop().unwrap_or_default();
            let all = buf.get(n * p as usize);
            for (k, &i) in whole.iter().enumerate() {
                // SAFETY: as above.
                let page = unsafe { whole_page(&jobs[i as usize], p) };
                all[k * p as usize..(k + 1) * p as usize].copy_from_slice(page);
            }
            buf
        });
        let op = Op {
            results: vec![Ok(()); n],
            jobs,
            pending: 0,
            whole,
            runs,
            bounce,
            needs_barrier: needs_barrier && self.target.needs_flush,
            phase: Phase::Writing,
        };
        let index = match st.free_ops.pop() {
            Some(i) => {
                st.ops[i as usize] = Some(op);
                i
            }
            None => {
                st.ops.push(Some(op));
                (st.ops.len() - 1) as u32
            }
        };
        let entries = self.data_entries(shared, &mut st, index);
        for entry in entries {
            self.push(&mut st, entry);
        }
        for s in staged {
            self.wait_block(&mut st, shared, index, s);
        }
        let op = st.ops[index as usize].as_ref().expect("op just inserted");
        if op.pending == 0 {
            st.ready.push(index);
            self.wake(&mut st);
        }
        self.held.store(true, Ordering::Release);
    }

    /// Submits the entries `submit` held.
    pub(super) fn submit_held(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            let mut st = self.lock();
            self.flush_sq(&mut st);
        }
    }

    /// The data writes of op `index`, one per run; counts them pending.
    fn data_entries(&self, shared: &Shared, st: &mut State, index: u32) -> Vec<squeue::Entry> {
        let p = shared.page_size_bytes as usize;
        let op = st.ops[index as usize].as_mut().expect("op in flight");
        let mut entries = Vec::with_capacity(op.runs.len());
        for (r, &(first, count)) in op.runs.iter().enumerate() {
            let i = op.whole[first as usize];
            let slot = SlotIndex(batch_slot(&op.jobs, i));
            let len = count as usize * p;
            let ptr = match &mut op.bounce {
                Some(b) => b.get(op.whole.len() * p)[first as usize * p..].as_ptr(),
                // SAFETY: the request is in flight; the run's pages are
                // contiguous in its buffer (`submit`).
                None => unsafe { whole_page(&op.jobs[i as usize], p as u64) }.as_ptr(),
            };
            let offset = shared.slot_offset_bytes(slot);
            let fd = match self.target.direct_fd {
                Some(direct)
                    if len >= crate::device::DIRECT_MIN_BYTES
                        && is_aligned(ptr as usize, offset, len, DIRECT_ALIGNMENT_BYTES) =>
                {
                    direct
                }
                _ => self.target.fd,
            };
            let entry = opcode::Write::new(types::Fd(fd), ptr, len as u32)
                .offset(offset)
                .rw_flags(self.target.rw_flags)
                .build()
                .user_data((KIND_DATA << KIND_SHIFT) | (u64::from(index) << OP_SHIFT) | r as u64);
            entries.push(entry);
            op.pending += 1;
        }
        entries
    }

    /// Registers op `index` as waiting for a staged record change, and
    /// starts the block's write when no one is writing it.
    fn wait_block(&self, st: &mut State, shared: &Shared, index: u32, staged: Staged) {
        let store = shared
            .store
            .as_ref()
            .expect("the io_uring path needs a store");
        let mut snapshot = st.snapshots.pop();
        let commit = store.commit_async(staged, &mut snapshot);
        st.snapshots.extend(snapshot);
        match commit {
            Commit::Done => return,
            Commit::Failed(e) => return self.fail_block(st, shared, index, staged.block, &e),
            Commit::Started(write) => self.start_block_write(st, write),
            Commit::Running => {}
        }
        st.waits
            .entry(staged.block)
            .or_default()
            .push((index, staged.target));
        st.ops[index as usize]
            .as_mut()
            .expect("op in flight")
            .pending += 1;
    }

    fn start_block_write(&self, st: &mut State, mut write: BlockWrite) {
        let block = write.block();
        let (offset, bytes) = write.bytes();
        let entry = opcode::Write::new(
            types::Fd(self.target.fd),
            bytes.as_ptr(),
            bytes.len() as u32,
        )
        .offset(offset)
        .rw_flags(self.target.rw_flags)
        .build()
        .user_data((KIND_BLOCK << KIND_SHIFT) | u64::from(block));
        // The snapshot's heap block stays where it is while `write` lives in `writes`.
        let previous = st.writes.insert(block, write);
        assert!(previous.is_none(), "one write of a record block at a time");
        self.push(st, entry);
    }

    /// Fails the jobs of op `index` whose records are in `block`.
    fn fail_block(&self, st: &mut State, shared: &Shared, index: u32, block: u32, e: &DeviceError) {
        let err = shared.io_fail(e, true);
        let op = st.ops[index as usize].as_mut().expect("op in flight");
        for (job, result) in op.jobs.iter().zip(op.results.iter_mut()) {
            if let IoCommand::WritePage { slot, .. } = &job.cmd {
                if CacheStore::block_of_slot(*slot) == block && result.is_ok() {
                    *result = Err(err);
                }
            }
        }
    }

    /// After a write of `block` ended: the waiting ops whose change it
    /// carried go on; the next write starts if some still wait.
    fn resolve_block(&self, st: &mut State, shared: &Shared, block: u32) {
        let Some(waiting) = st.waits.remove(&block) else {
            return;
        };
        let store = shared
            .store
            .as_ref()
            .expect("the io_uring path needs a store");
        let mut still = Vec::with_capacity(waiting.len());
        for (index, target) in waiting {
            let mut snapshot = st.snapshots.pop();
            let commit = store.commit_async(Staged { block, target }, &mut snapshot);
            st.snapshots.extend(snapshot);
            let done = match commit {
                Commit::Done => true,
                Commit::Failed(e) => {
                    self.fail_block(st, shared, index, block, &e);
                    true
                }
                Commit::Started(write) => {
                    self.start_block_write(st, write);
                    false
                }
                Commit::Running => false,
            };
            if done {
                self.one_done(st, index);
            } else {
                still.push((index, target));
            }
        }
        if !still.is_empty() {
            st.waits.insert(block, still);
        }
    }

    fn one_done(&self, st: &mut State, index: u32) {
        let op = st.ops[index as usize].as_mut().expect("op in flight");
        assert!(
            op.pending > 0,
            "an op's pending count never goes below zero"
        );
        op.pending -= 1;
        if op.pending == 0 {
            st.ready.push(index);
        }
    }

    /// Wakes the reaping thread (a no-op entry that completes at once).
    fn wake(&self, st: &mut State) {
        let nop = opcode::Nop::new().build();
        self.push(st, nop.user_data(KIND_WAKE << KIND_SHIFT));
    }

    fn push(&self, st: &mut State, entry: squeue::Entry) {
        loop {
            // SAFETY: every producer holds the state lock (one at a time);
            // the entry's buffers live until its completion (ops, writes).
            let pushed = unsafe { self.ring.submission_shared().push(&entry) }.is_ok();
            if pushed {
                st.unsubmitted = true;
                if entry.get_user_data() >> KIND_SHIFT != KIND_WAKE {
                    self.in_flight.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            // Full: hand what is there to the kernel, then try again.
            if self.ring.submit().is_err() {
                std::thread::yield_now();
            }
        }
    }

    fn flush_sq(&self, st: &mut State) {
        if !st.unsubmitted {
            return;
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    // Completions must be reaped first (the reaping thread does).
                    std::thread::yield_now();
                }
                Err(_) => break, // EAGAIN and the like: the next submit retries.
            }
        }
        // SAFETY: producers hold the state lock.
        st.unsubmitted = !unsafe { self.ring.submission_shared() }.is_empty();
    }

    /// The reaping thread: waits for completions, handles them in a batch,
    /// completes the finished ops under one engine lock, and answers.
    pub(super) fn run(&self, shared: &Shared) {
        let mut cqes: Vec<(u64, i32)> = Vec::new();
        let min_timeout = self.ring.params().is_feature_min_timeout();
        loop {
            let want = (self.in_flight.load(Ordering::Relaxed) / 4).clamp(1, REAP_BATCH_MAX);
            let waited = if min_timeout && want > 1 {
                // May also submit entries other threads pushed: harmless
                // (the kernel takes only those published under their lock).
                let args = types::SubmitArgs::new().min_wait_usec(REAP_WAIT_US);
                self.ring.submitter().submit_with_args(want as usize, &args)
            } else {
                // SAFETY: no argument is passed; this only waits for events.
                unsafe {
                    self.ring
                        .submitter()
                        .enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None)
                }
            };
            if let Err(e) = waited {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::ETIME)) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            let mut finished = Vec::new();
            let exit = {
                let mut st = self.lock();
                cqes.clear();
                // SAFETY: this thread is the only consumer of completions.
                cqes.extend(
                    unsafe { self.ring.completion_shared() }
                        .map(|c: cqueue::Entry| (c.user_data(), c.result())),
                );
                for &(user_data, result) in &cqes {
                    self.on_completion(&mut st, shared, user_data, result);
                }
                self.advance(&mut st, shared, &mut finished);
                self.flush_sq(&mut st);
                st.stopping && st.ops.iter().all(Option::is_none) && st.writes.is_empty()
            };
            self.complete(shared, finished);
            if exit {
                return;
            }
        }
    }

    fn on_completion(&self, st: &mut State, shared: &Shared, user_data: u64, result: i32) {
        let kind = user_data >> KIND_SHIFT;
        if kind != KIND_WAKE {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        let payload = user_data & ((1 << KIND_SHIFT) - 1);
        match kind {
            KIND_DATA => {
                let index = (payload >> OP_SHIFT) as u32;
                let run = (payload & RUN_MASK) as usize;
                let p = shared.page_size_bytes;
                let op = st.ops[index as usize].as_mut().expect("op in flight");
                let (first, count) = op.runs[run];
                let len = u64::from(count) * p;
                if let Err(e) = outcome(result, len) {
                    let slot = SlotIndex(batch_slot(&op.jobs, op.whole[first as usize]));
                    let e = device_error(shared, "write", shared.slot_offset_bytes(slot), len, e);
                    let err = shared.io_fail(&e, true);
                    for &i in &op.whole[first as usize..(first + count) as usize] {
                        op.results[i as usize] = Err(err);
                    }
                }
                self.one_done(st, index);
            }
            KIND_BLOCK => {
                let block = payload as u32;
                let Some(mut write) = st.writes.remove(&block) else {
                    unreachable!("a block completion names a write in flight");
                };
                let (offset, bytes) = write.bytes();
                let len = bytes.len() as u64;
                let result = outcome(result, len)
                    .map_err(|e| device_error(shared, "record write", offset, len, e));
                let store = shared
                    .store
                    .as_ref()
                    .expect("the io_uring path needs a store");
                let snapshot = store.end_async(write, result);
                st.snapshots.push(snapshot);
                self.resolve_block(st, shared, block);
            }
            KIND_FSYNC => {
                st.fsync_in_flight = false;
                shared
                    .counters
                    .cache_flushes
                    .fetch_add(1, Ordering::Relaxed);
                let failed = outcome(result, 0).err().map(|e| {
                    let e = device_error(shared, "fdatasync", 0, 0, e);
                    shared.io_fail(&e, true)
                });
                for index in std::mem::take(&mut st.barrier_running) {
                    let op = st.ops[index as usize].as_mut().expect("op in flight");
                    if let Some(err) = failed {
                        for (job, r) in op.jobs.iter().zip(op.results.iter_mut()) {
                            if r.is_ok() && shared.batch_needs(&job.cmd).1 {
                                *r = Err(err);
                            }
                        }
                    }
                    st.ready.push(index);
                }
            }
            _ => {} // a wake-up
        }
    }

    /// Moves ready ops on: unstaging the records of failed pages, the
    /// barrier, or done (into `finished`).
    fn advance(&self, st: &mut State, shared: &Shared, finished: &mut Vec<Op>) {
        let store = shared
            .store
            .as_ref()
            .expect("the io_uring path needs a store");
        while let Some(index) = st.ready.pop() {
            let op = st.ops[index as usize].as_mut().expect("op in flight");
            if op.phase == Phase::Writing {
                op.phase = Phase::Unstaging;
                // A page whose data write failed must not keep a record
                // naming the version that was refused.
                let failed: Vec<SlotIndex> = op
                    .jobs
                    .iter()
                    .zip(&op.results)
                    .filter(|(_, r)| r.is_err())
                    .filter_map(|(j, _)| match &j.cmd {
                        IoCommand::WritePage { slot, .. } => Some(*slot),
                        _ => None,
                    })
                    .collect();
                if !failed.is_empty() {
                    let (mut sorted, mut staged) = (Vec::new(), Vec::new());
                    store.stage_frees(&failed, &mut sorted, &mut staged);
                    for s in staged {
                        self.wait_block(st, shared, index, s);
                    }
                    let op = st.ops[index as usize].as_ref().expect("op in flight");
                    if op.pending > 0 {
                        continue;
                    }
                }
            }
            let op = st.ops[index as usize].as_mut().expect("op in flight");
            if op.phase == Phase::Unstaging {
                let wants = op
                    .jobs
                    .iter()
                    .zip(&op.results)
                    .any(|(j, r)| r.is_ok() && shared.batch_needs(&j.cmd).1);
                if op.needs_barrier && wants {
                    op.phase = Phase::Barrier;
                    st.barrier_waiting.push(index);
                    continue;
                }
            }
            let Some(op) = st.ops[index as usize].take() else {
                unreachable!("a ready op is in flight");
            };
            st.free_ops.push(index);
            finished.push(op);
        }
        if !st.fsync_in_flight && !st.barrier_waiting.is_empty() {
            // Covers every write of the ops waiting: all completed before now.
            st.barrier_running = std::mem::take(&mut st.barrier_waiting);
            st.fsync_in_flight = true;
            let entry = opcode::Fsync::new(types::Fd(self.target.fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(KIND_FSYNC << KIND_SHIFT);
            self.push(st, entry);
        }
    }

    /// Completes the commands of finished ops under one engine lock, then
    /// sends out what follows and tells the answers.
    fn complete(&self, shared: &Shared, finished: Vec<Op>) {
        if finished.is_empty() {
            return;
        }
        let mut jobs = std::collections::VecDeque::new();
        let mut bounces = Vec::new();
        {
            let mut core = shared.lock_core();
            let now = shared.now();
            for op in &finished {
                for (job, result) in op.jobs.iter().zip(&op.results) {
                    core.engine
                        .handle_completion(now, job.cmd.io(), *result)
                        .expect("completion of a command the engine issued");
                }
            }
            shared.pump(&mut core, &mut jobs);
        }
        shared
            .counters
            .cache_page_writes
            .fetch_add(finished.len() as u64, Ordering::Relaxed);
        for op in finished {
            bounces.extend(op.bounce);
        }
        if !bounces.is_empty() {
            self.lock().bounces.extend(bounces);
        }
        shared.to_pool(jobs.into_iter());
    }

    /// Ends the reaping thread once no op is in flight.
    pub(super) fn stop(&self) {
        let mut st = self.lock();
        st.stopping = true;
        self.wake(&mut st);
        self.flush_sq(&mut st);
    }
}

/// A write's result: `Ok` when all `len_bytes` were written (0: a sync).
fn outcome(result: i32, len_bytes: u64) -> Result<(), std::io::Error> {
    if result < 0 {
        return Err(std::io::Error::from_raw_os_error(-result));
    }
    if result as u64 != len_bytes {
        return Err(std::io::Error::other(format!(
            "short write: {result} of {len_bytes} bytes"
        )));
    }
    Ok(())
}

fn device_error(
    shared: &Shared,
    op: &'static str,
    offset_bytes: u64,
    len_bytes: u64,
    source: std::io::Error,
) -> DeviceError {
    DeviceError::Io {
        device: shared.cache.dev.name(),
        op,
        offset_bytes,
        len_bytes,
        source,
    }
}
