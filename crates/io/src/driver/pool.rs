//! The pool threads: they run the commands no client thread keeps (destages,
//! batches, tail moves, checkpoints), each its own released jobs first
//! while none waits in the pool.

use super::*;

impl Shared {
    pub(super) fn pool_thread(&self) {
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
                    if pool.stopping || self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    pool = self
                        .pool_ready
                        .wait(pool)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
            self.run_pool_jobs(&mut jobs);
        }
    }

    /// A pool thread runs its own jobs (those its completions released, in
    /// order) while no job waits in the pool; once one does, it hands its
    /// own to the back of the pool and takes the pool's first. (Without
    /// this, threads whose destages released the next destages, one after
    /// another, never came back to the pool: a tail move or a checkpoint
    /// waited there for as long as a drain lasted, 30 s and more.)
    fn run_pool_jobs(&self, jobs: &mut VecDeque<Job>) {
        while let Some(job) = jobs.pop_front() {
            if self.abandoned.load(Ordering::Relaxed) {
                jobs.clear();
                return;
            }
            self.execute_and_complete(job, jobs);
            let waiting = || self.pool.try_lock().is_ok_and(|p| !p.jobs.is_empty());
            if !jobs.is_empty() && waiting() {
                self.to_pool(jobs.drain(..));
            }
        }
    }
}
