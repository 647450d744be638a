//! The process side of a running service: stop signals received
//! synchronously, and the process settings a server needs before its
//! first thread. It exists so that every front end stops the same way on
//! SIGINT, SIGTERM and `wcache stop`; it must never install a signal
//! handler (the signals are blocked and waited for instead).

use std::time::Duration;

/// SIGINT and SIGTERM, blocked in the thread that made this (and in every
/// thread it starts afterwards), so that they are received only by
/// `wait` and `within`, never delivered to a handler.
pub(super) struct StopSignals {
    set: libc::sigset_t,
}

impl StopSignals {
    /// Blocks SIGINT and SIGTERM in this thread and every thread it starts
    /// afterwards: call it before any thread starts.
    pub(super) fn block() -> StopSignals {
        // SAFETY: plain libc calls on a sigset we own.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        };
        StopSignals { set }
    }

    /// Waits for a stop signal; returns its number.
    pub(super) fn wait(&self) -> i32 {
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` was initialised by `block`.
        unsafe { libc::sigwait(&self.set, &mut signal) };
        signal
    }

    /// A stop signal received within `timeout`, if any.
    pub(super) fn within(&self, timeout: Duration) -> Option<i32> {
        let wait = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `set` was initialised by `block`; a null siginfo is allowed.
        let signal = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &wait) };
        (signal > 0).then_some(signal)
    }
}

/// Asks this process to stop as SIGTERM does: what `wcache stop` does
/// through the control socket, and what a front end whose clients went
/// away for good (a file system unmounted) calls, so that the one stop
/// sequence runs (`Service::wait_for_stop` returns).
pub fn request_stop() {
    // SAFETY: kill(2) of this very process.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
}

/// A server lives on when its standard output goes away (EPIPE, not
/// SIGPIPE; its prints ignore the error); so do its sockets' writes.
pub(super) fn ignore_sigpipe() {
    // SAFETY: signal(2) with SIG_IGN, before the server starts any thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Request buffers of 256 KiB and more are mapped and unmapped by the
/// allocator rather than kept in its per-thread arenas. Each NBD connection
/// has its own reader thread; with glibc's default (a threshold that rises
/// to 32 MiB after the first large free) every arena kept the largest
/// buffers it ever held: RSS rose from 11 to 272 MiB over 2,000 connections
/// of 20 I/Os of 4 KiB–4 MiB, and stays at about 25 MiB with this
/// (`scripts/rss-soak.sh`, `docs/benchmarks.md`).
pub(super) fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a tuning parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}
