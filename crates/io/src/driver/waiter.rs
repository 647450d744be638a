//! The waiter: how a thread that submitted a request sleeps until its
//! answer is set, and is woken only when it sleeps (most answers are set
//! by the owner itself, with no futex call). It must never lose an answer
//! set before the owner waits.

use std::sync::{Condvar, Mutex, MutexGuard};

use wcache_core::IoError;

/// One client thread's place to be woken with its response.
pub(super) struct Waiter {
    pub(super) state: Mutex<WaiterState>,
    pub(super) ready: Condvar,
}

#[derive(Default)]
pub(super) struct WaiterState {
    result: Option<Result<(), IoError>>,
    /// The owner is blocked in `wait`: only then does `set` need a wake-up
    /// (a futex syscall). Most responses are set by the owner itself.
    sleeping: bool,
}

impl Waiter {
    fn lock(&self) -> MutexGuard<'_, WaiterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(super) fn set(&self, result: Result<(), IoError>) {
        let mut st = self.lock();
        st.result = Some(result);
        if st.sleeping {
            self.ready.notify_one();
        }
    }
    pub(super) fn take(&self) -> Option<Result<(), IoError>> {
        self.lock().result.take()
    }
    pub(super) fn wait(&self) -> Result<(), IoError> {
        let mut st = self.lock();
        loop {
            if let Some(result) = st.result.take() {
                st.sleeping = false;
                return result;
            }
            st.sleeping = true;
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
    pub(super) fn is_set(&self) -> bool {
        self.lock().result.is_some()
    }
}
