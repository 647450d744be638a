//! Record frees run by one thread of the `Driver`, off the request path,
//! in rounds the engine gathers (`Engine::set_free_gathering`: the one
//! place frees are batched; here it is asked for rounds of up to 100 ms or
//! 8,192 slots), so that freeing the old versions of overwritten pages
//! costs a few large record writes and one barrier per round instead of a
//! small write per record block (and, in `fdatasync` mode, a flush) per
//! request. Used where a free costs a flush or a write that waits for the
//! medium (`fdatasync`, `dsync`), not on memory-like devices (`nvram`).
//!
//! Delaying a free is always safe: the engine reuses a slot only after its
//! `FreeSlots` completed, and frees a page's old versions oldest first, one
//! command at a time (`docs/on-disk-format.md`, "How records are written").
//! This module must never complete a free before its zeroed records are
//! durable, nor let a zeroed record reach the device before the newer
//! version of its page is durable (persist-on-flush: a flush first).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, MutexGuard};

use wcache_core::{IoCommand, IoError};

use super::{Job, Shared};

/// How long the engine lets a free wait for others to join it, unless it
/// needs it sooner (writes waiting for room, a drain)...
pub(super) const GATHER_DELAY_NS: u64 = 100_000_000;
/// ...or how many slots it gathers into one round at most.
pub(super) const GATHER_SLOTS: usize = 8192;

/// Frees completed under one hold of the engine lock.
const COMPLETIONS_PER_LOCK: usize = 64;

/// Record blocks merged into one write: staged blocks at most this many
/// blocks apart are written with the blocks between them, up to
/// `RUN_BLOCKS_MAX` blocks (256 KiB) per write.
const GAP_BLOCKS_MAX: u32 = 8;
const RUN_BLOCKS_MAX: u32 = 64;

/// The frees waiting for the free thread.
pub(super) struct FreeQueue {
    state: Mutex<FreeState>,
    ready: Condvar,
}

struct FreeState {
    jobs: Vec<Job>,
    stopping: bool,
    /// No free thread (none started, or it has exited): frees run where
    /// they are found.
    stopped: bool,
}

impl FreeQueue {
    /// `running`: a free thread will be started.
    pub(super) fn new(running: bool) -> FreeQueue {
        FreeQueue {
            state: Mutex::new(FreeState {
                jobs: Vec::new(),
                stopping: false,
                stopped: !running,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FreeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The free thread runs what is waiting now and exits.
    pub(super) fn stop(&self) {
        self.lock().stopping = true;
        self.ready.notify_one();
    }
}

impl Shared {
    /// Moves the record frees of `batch` to the free thread while it runs;
    /// returns the other jobs (all of them when it does not run).
    pub(super) fn defer_frees(&self, batch: Vec<Job>) -> Vec<Job> {
        if !batch
            .iter()
            .any(|j| matches!(j.cmd, IoCommand::FreeSlots { .. }))
        {
            return batch;
        }
        let mut st = self.frees.lock();
        if st.stopped {
            return batch;
        }
        let (frees, rest): (Vec<Job>, Vec<Job>) = batch
            .into_iter()
            .partition(|j| matches!(j.cmd, IoCommand::FreeSlots { .. }));
        st.jobs.extend(frees);
        self.frees.ready.notify_one();
        rest
    }

    /// The free thread: runs what is waiting as one round, repeats; on
    /// `FreeQueue::stop` runs what is left and exits.
    pub(super) fn free_thread(&self) {
        loop {
            let jobs = {
                let mut st = self.frees.lock();
                loop {
                    if !st.jobs.is_empty() {
                        break std::mem::take(&mut st.jobs);
                    }
                    if st.stopping {
                        st.stopped = true;
                        return;
                    }
                    st = self.frees.ready.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            if self.abandoned.load(Ordering::Relaxed) {
                continue; // dropped, never completed (shutdown_within)
            }
            self.run_frees(jobs);
        }
    }

    /// One round: (persist-on-flush) a flush that makes the newer versions
    /// durable, the records of every free zeroed in memory and written in
    /// merged runs, one barrier, then every free completed under one lock.
    fn run_frees(&self, jobs: Vec<Job>) {
        let store = self.store.as_ref().expect("record frees need a store");
        let mut results: Vec<Result<(), IoError>> = vec![Ok(()); jobs.len()];
        let before = if self.persist_on_flush.load(Ordering::Relaxed) {
            self.make_durable(&self.cache, true)
                .map_err(|e| self.io_fail(&e, true))
        } else {
            Ok(())
        };
        if let Err(e) = before {
            results.fill(Err(e));
        } else {
            let (mut sorted, mut staged, mut staged_job) = (Vec::new(), Vec::new(), Vec::new());
            for (i, job) in jobs.iter().enumerate() {
                if let IoCommand::FreeSlots { slots, .. } = &job.cmd {
                    store.stage_frees(slots, &mut sorted, &mut staged);
                    staged_job.resize(staged.len(), i);
                }
            }
            store.write_merged(&staged, GAP_BLOCKS_MAX, RUN_BLOCKS_MAX, &mut |k, e| {
                results[staged_job[k]] = Err(self.io_fail(e, true));
            });
            if results.iter().any(|r| r.is_ok()) {
                if let Err(e) = self.make_durable(&self.cache, true) {
                    let err = self.io_fail(&e, true);
                    for r in results.iter_mut().filter(|r| r.is_ok()) {
                        *r = Err(err);
                    }
                }
            }
        }
        // Completed in chunks, so that requests are not held off the
        // engine lock for a whole round.
        let mut released = VecDeque::new();
        for (jobs, results) in jobs
            .chunks(COMPLETIONS_PER_LOCK)
            .zip(results.chunks(COMPLETIONS_PER_LOCK))
        {
            let mut core = self.lock_core();
            let now = self.now();
            for (job, result) in jobs.iter().zip(results) {
                core.engine
                    .handle_completion(now, job.cmd.io(), *result)
                    .expect("completion of a command the engine issued");
            }
            self.pump(&mut core, &mut released);
            if core.changed_waiters > 0 {
                self.changed.notify_all();
            }
            drop(core);
            self.to_pool(released.drain(..));
        }
    }
}
