//! The server's bounded multi-producer multi-consumer job queue: readers
//! push received requests, workers pop them; a full queue makes readers
//! wait (backpressure), a closed one hands jobs back.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

pub(super) struct JobQueue<T> {
    state: Mutex<QueueState<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    depth_max: usize,
}

struct QueueState<T> {
    jobs: VecDeque<T>,
    closed: bool,
}

impl<T> JobQueue<T> {
    pub(super) fn new(depth_max: usize) -> Self {
        assert!(depth_max > 0);
        JobQueue {
            state: Mutex::new(QueueState {
                jobs: VecDeque::with_capacity(depth_max),
                closed: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            depth_max,
        }
    }

    /// Blocks while full; gives the job back if the queue is closed.
    pub(super) fn push(&self, job: T) -> Result<(), T> {
        let mut state = self.lock();
        while state.jobs.len() >= self.depth_max && !state.closed {
            state = self.not_full.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.closed {
            return Err(job);
        }
        state.jobs.push_back(job);
        assert!(state.jobs.len() <= self.depth_max);
        drop(state);
        self.not_empty.notify_one();
        Ok(())
    }

    /// Blocks while empty; `None` once closed and drained.
    pub(super) fn pop(&self) -> Option<T> {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                self.not_full.notify_one();
                return Some(job);
            }
            if state.closed {
                return None;
            }
            state = self
                .not_empty
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}
