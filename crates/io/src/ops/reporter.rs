//! The error reporter: a thread that logs backing and cache I/O errors as
//! they happen, for a front end that serves (the driver counts them; the
//! engine keeps failed destages dirty and retries them). It exists so that
//! an operator reads of a failing device in the log at once, not only in
//! the counters; it must never act on the errors.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cache::Monitor;

/// A thread that logs backing and cache errors as they happen (the driver
/// counts them; the engine keeps failed destages dirty and retries them).
pub struct ErrorReporter {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl ErrorReporter {
    pub fn start(monitor: Monitor) -> std::io::Result<ErrorReporter> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wcache-errors".into())
            .spawn(move || report_errors(&monitor, &flag))?;
        Ok(ErrorReporter { stop, thread })
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

fn report_errors(monitor: &Monitor, stop: &AtomicBool) {
    let mut seen = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let s = monitor.stats();
        if (s.backing_errors, s.cache_errors) != seen {
            tracing::warn!(
                "I/O errors so far: {} backing, {} cache (last: {}); failed destages are \
                 retried, their pages stay dirty and readable; {} dirty pages",
                s.backing_errors,
                s.cache_errors,
                s.last_error.as_deref().unwrap_or("?"),
                monitor.dirty_pages()
            );
            seen = (s.backing_errors, s.cache_errors);
        }
    }
}
