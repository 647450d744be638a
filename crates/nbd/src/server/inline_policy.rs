//! The choice, per request, between running it on the connection's reader
//! thread and handing it to the workers (`InlinePolicy`). It exists to keep
//! that heuristic apart from the moving of bytes; it must never block.

use std::time::Duration;

/// Requests handed to the workers, while too many inline requests were
/// slow, between two run inline to measure again.
const INLINE_PROBE_EVERY: u32 = 16;
/// Hand over while more than 1 in this many recent inline requests were slow.
const INLINE_SLOW_ONE_IN: u64 = 20;

/// Chooses, per request, between running it on the reader thread and
/// handing it to the workers, from the share of recent inline requests that
/// took longer than `inline_service_max` (a moving average, weight 1/32 per
/// request, in parts per 2^20). A share, not a mean time: one preemption of
/// the reader must not send a fast export's requests to the workers, but a
/// cache that misses to a disk one time in ten must. A slow request during
/// which the reader was preempted (its count of involuntary context
/// switches moved) is not counted: on a busy host, the scheduler, not the
/// export, made it slow.
pub(super) struct InlinePolicy {
    pub(super) max_ns: u64,
    pub(super) slow_share: u64,
    pub(super) handed_over: u32,
    pub(super) preemptions: u64,
}

impl InlinePolicy {
    const ONE: u64 = 1 << 20;

    pub(super) fn run_inline(&mut self) -> bool {
        if self.max_ns == 0 {
            return false;
        }
        if self.slow_share <= Self::ONE / INLINE_SLOW_ONE_IN {
            return true;
        }
        // Slow lately: hand over, but measure again now and then, so a
        // passing stall does not keep a fast export off the fast path.
        self.handed_over += 1;
        if self.handed_over >= INLINE_PROBE_EVERY {
            self.handed_over = 0;
            return true;
        }
        false
    }

    pub(super) fn note(&mut self, elapsed: Duration) {
        let mut slow = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX) > self.max_ns;
        if slow {
            // Only slow requests pay for the system call. The count also
            // moves for a preemption since the last slow request, which at
            // worst lets one slow request of a slow export go uncounted.
            let preemptions = thread_preemptions();
            if preemptions != self.preemptions {
                self.preemptions = preemptions;
                slow = false;
            }
        }
        let sample = if slow { Self::ONE } else { 0 };
        self.slow_share = self.slow_share - self.slow_share / 32 + sample / 32;
    }
}

/// Involuntary context switches of the calling thread so far.
pub(super) fn thread_preemptions() -> u64 {
    // SAFETY: getrusage fills a zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(usage.ru_nivcsw).unwrap_or(0)
}
