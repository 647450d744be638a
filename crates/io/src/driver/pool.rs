//! The pool threads: they run the commands no client thread keeps (destages,
//! batches, tail moves, checkpoints, a large request's extra commands). No
//! request waits behind the backing: jobs on the cache device go ahead of a
//! request's backing I/O, which goes ahead of destages; one thread (of two
//! or more) runs only jobs on the cache device; and a thread shares what
//! its completions released while another idles or jobs wait.

use super::*;

/// What a job waits on, in the order the pool runs them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Class {
    /// The cache device only: a batch of the log, page writes, frees, the
    /// tail's moves, checkpoints, cached reads.
    Cache,
    /// The backing, for a request: a write-through or bypass write, a read
    /// miss, a journaled transaction's writes.
    Backing,
    /// The backing, for no request now: a destage.
    Destage,
}

const CLASSES: usize = 3;

fn class(job: &Job) -> Class {
    use IoCommand as C;
    match job.cmd {
        C::WritePage { .. }
        | C::WritePages { .. }
        | C::FreeSlots { .. }
        | C::ReadPage { .. }
        | C::WriteBatch { .. }
        | C::AdvanceLog { .. }
        | C::LogCheckpoint { .. } => Class::Cache,
        C::ReadBacking { .. }
        | C::WriteBacking { .. }
        | C::Stage { .. }
        | C::Commit { .. }
        | C::Retire { .. } => Class::Backing,
        C::Destage { .. } => Class::Destage,
    }
}

/// The jobs waiting for a pool thread, a queue per class.
#[derive(Default)]
pub(super) struct Pool {
    queues: [VecDeque<Job>; CLASSES],
    /// Pool threads waiting for a job.
    idle: usize,
    pub(super) stopping: bool,
}

impl Pool {
    /// A job waits that a thread taking classes up to `most` could take.
    fn waiting(&self, most: Class) -> bool {
        self.queues[..=most as usize].iter().any(|q| !q.is_empty())
    }

    /// Moves the pool's first job of the first class up to `most` into
    /// `jobs` (page writes and record frees queued together, as one
    /// batch); false if there is none.
    fn take(&mut self, most: Class, jobs: &mut VecDeque<Job>) -> bool {
        let Some(queue) = self.queues[..=most as usize]
            .iter_mut()
            .find(|q| !q.is_empty())
        else {
            return false;
        };
        let job = queue.pop_front().expect("a queue with a job");
        let batch = is_batched(&job);
        jobs.push_back(job);
        while batch && jobs.len() < WRITE_BATCH_MAX && queue.front().is_some_and(is_batched) {
            jobs.extend(queue.pop_front());
        }
        true
    }
}

/// The next of a thread's own jobs: the first of the first class it has.
/// (Before, a format-3 batch released behind a drain's destages waited for
/// them all on one thread, 1.4 s and more, while the other pool threads
/// slept.)
fn next_job(jobs: &mut VecDeque<Job>) -> Option<Job> {
    let first = jobs.iter().enumerate().min_by_key(|(_, j)| class(j))?.0;
    jobs.remove(first)
}

impl Shared {
    /// A pool thread, taking jobs of classes up to `most`: `Class::Cache`
    /// for the one that keeps a thread free for the cache device while
    /// every other waits on the backing (a drain of expired pages at 20
    /// destages outstanding held each format-3 batch 172 ms, the time of
    /// one destage behind the emulated HDD's queue).
    pub(super) fn pool_thread(&self, most: Class) {
        let mut jobs = VecDeque::new();
        loop {
            {
                let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if pool.take(most, &mut jobs) {
                        break;
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
            self.run_pool_jobs(&mut jobs, most);
        }
    }

    /// A pool thread runs its own jobs (those its completions released,
    /// by class) while it has one or no other thread could take them; once
    /// a job it could take waits in the pool, or a thread idles while it
    /// holds more than one, it hands its own to the pool and takes the
    /// pool's first. (Without this, threads whose destages released the
    /// next destages, one after another, never came back to the pool: a
    /// tail move or a checkpoint waited there for as long as a drain
    /// lasted, 30 s and more.) Jobs of a class it does not take go to the
    /// pool at once.
    fn run_pool_jobs(&self, jobs: &mut VecDeque<Job>, most: Class) {
        while let Some(job) = next_job(jobs) {
            if self.abandoned.load(Ordering::Relaxed) {
                jobs.clear();
                return;
            }
            self.execute_and_complete(job, jobs);
            if most < Class::Destage && jobs.iter().any(|j| class(j) > most) {
                let (theirs, mine): (VecDeque<Job>, VecDeque<Job>) =
                    jobs.drain(..).partition(|j| class(j) > most);
                *jobs = mine;
                self.to_pool(theirs.into_iter());
            }
            let share = |p: &Pool| p.waiting(most) || (p.idle > 0 && jobs.len() > 1);
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
        let (added, mut on_backing) = (jobs.len(), 0);
        for job in jobs {
            let c = class(&job);
            on_backing += usize::from(c != Class::Cache);
            pool.queues[c as usize].push_back(job);
        }
        // One job on the cache, which every thread takes, wakes one; a job
        // on the backing wakes all, for the one woken could be the thread
        // that takes none, which would sleep again with the job left in the
        // pool (a write-through test hung so, its destage retry never run).
        if added == 1 && on_backing == 0 {
            self.pool_ready.notify_one();
        } else {
            self.pool_ready.notify_all();
        }
    }
}

/// The classes the pool thread `i` of `threads` takes: with more than one,
/// the first takes only jobs on the cache device.
pub(super) fn most_for(i: usize, threads: usize) -> Class {
    if threads > 1 && i == 0 {
        Class::Cache
    } else {
        Class::Destage
    }
}
