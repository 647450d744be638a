//! The pool threads: they run the commands no client thread keeps (destages,
//! batches, tail moves, checkpoints). No request waits behind a drain: a
//! request's commands go ahead of destages, one thread (of two or more)
//! never runs a destage, and a thread shares what its completions released
//! while another idles or jobs wait.

use super::*;

/// The jobs waiting for a pool thread: a request's commands (and the
/// engine's own cache work) ahead of destages, which wait on the backing.
#[derive(Default)]
pub(super) struct Pool {
    jobs: VecDeque<Job>,
    destages: VecDeque<Job>,
    /// Pool threads waiting for a job.
    idle: usize,
    pub(super) stopping: bool,
}

fn is_destage(job: &Job) -> bool {
    matches!(job.cmd, IoCommand::Destage { .. })
}

/// The next of a thread's own jobs: the first that is not a destage, else
/// the first destage. (Before, a format-3 batch released behind a drain's
/// destages waited for them all on one thread, 1.4 s and more, while the
/// other pool threads slept.)
fn next_job(jobs: &mut VecDeque<Job>) -> Option<Job> {
    match jobs.iter().position(|j| !is_destage(j)) {
        Some(i) => jobs.remove(i),
        None => jobs.pop_front(),
    }
}

/// A thread that runs no destage gives those it released to the pool.
fn split_destages(jobs: &mut VecDeque<Job>) -> VecDeque<Job> {
    let (destages, rest): (VecDeque<Job>, VecDeque<Job>) = jobs.drain(..).partition(is_destage);
    *jobs = rest;
    destages
}

impl Shared {
    /// A pool thread; `destages` false for the one that keeps a thread free
    /// for requests while every other waits on the backing (a drain of
    /// expired pages at 20 destages outstanding held each format-3 batch
    /// 172 ms, the time of one destage behind the emulated HDD's queue).
    pub(super) fn pool_thread(&self, destages: bool) {
        let mut jobs = VecDeque::new();
        loop {
            {
                let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(job) = pool.jobs.pop_front() {
                        // Page writes and record frees queued together run as one batch.
                        let batch = is_batched(&job);
                        jobs.push_back(job);
                        while batch
                            && jobs.len() < WRITE_BATCH_MAX
                            && pool.jobs.front().is_some_and(is_batched)
                        {
                            jobs.extend(pool.jobs.pop_front());
                        }
                        break;
                    }
                    if destages {
                        if let Some(job) = pool.destages.pop_front() {
                            jobs.push_back(job);
                            break;
                        }
                    }
                    if pool.stopping || self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    pool.idle += 1;
                    pool = self
                        .pool_ready
                        .wait(pool)
                        .unwrap_or_else(|p| p.into_inner());
                    pool.idle -= 1;
                }
            }
            self.run_pool_jobs(&mut jobs, destages);
        }
    }

    /// A pool thread runs its own jobs (those its completions released,
    /// a request's first) while it has one or no other thread could take
    /// them; once a job waits in the pool or a thread idles with more than
    /// one in hand, it hands its own to the pool and takes the pool's
    /// first. (Without this, threads whose destages released the next
    /// destages, one after another, never came back to the pool: a tail
    /// move or a checkpoint waited there for as long as a drain lasted,
    /// 30 s and more.)
    fn run_pool_jobs(&self, jobs: &mut VecDeque<Job>, destages: bool) {
        while let Some(job) = next_job(jobs) {
            if self.abandoned.load(Ordering::Relaxed) {
                jobs.clear();
                return;
            }
            self.execute_and_complete(job, jobs);
            if !destages && jobs.iter().any(is_destage) {
                self.to_pool(split_destages(jobs).into_iter());
            }
            // Jobs this thread could take wait in the pool, or a thread idles.
            let share = |p: &Pool| {
                !p.jobs.is_empty()
                    || (destages && !p.destages.is_empty())
                    || (p.idle > 0 && jobs.len() > 1)
            };
            let share = || self.pool.try_lock().is_ok_and(|p| share(&p));
            if !jobs.is_empty() && share() {
                self.to_pool(jobs.drain(..));
            }
        }
    }

    /// Queues jobs for the pool threads (record frees go to the free
    /// thread) and wakes threads to take them.
    pub(super) fn to_pool(&self, jobs: impl Iterator<Item = Job>) {
        self.run_answered();
        // Record frees go to the free thread straight away (no pool
        // thread's wake-up just to pass them on).
        let jobs = self.defer_frees(jobs.collect());
        if jobs.is_empty() {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.stopping {
            // The pool threads are gone or going: run here so no request hangs.
            drop(pool);
            let mut local: VecDeque<Job> = jobs.into();
            self.run_jobs(&mut local, None);
            return;
        }
        let (added, mut destages) = (jobs.len(), 0);
        for job in jobs {
            if is_destage(&job) {
                pool.destages.push_back(job);
                destages += 1;
            } else {
                pool.jobs.push_back(job);
            }
        }
        // One job any thread takes wakes one; a destage wakes all, for the
        // one woken could be the thread that runs none, which would sleep
        // again with the destage left in the pool (a write-through test
        // hung so, its destage retry never run).
        if added == 1 && destages == 0 {
            self.pool_ready.notify_one();
        } else {
            self.pool_ready.notify_all();
        }
    }
}
