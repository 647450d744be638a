//! The bounded stop of a front end: it stops taking requests and those in
//! flight finish within a grace period; then what still waits is answered
//! with an error. It exists so that every front end stops within the same
//! bound (`--stop-timeout`); it must never destage at stop (the dirty
//! pages stay for the next start) nor wait past the grace period for a
//! backing that does not answer.

use std::time::{Duration, Instant};

use super::signals::StopSignals;
use super::FrontEnd;
use crate::cache::Cache;

/// Time allowed, after the grace period, for requests just answered with
/// an error to reach their clients, and for the driver's threads to stop.
pub const STOP_AFTER_GRACE: Duration = Duration::from_millis(500);

/// How a wait within the grace period ended.
#[derive(PartialEq)]
enum Grace {
    Done,
    Over,
    Signal,
}

/// Waits until `done`, the deadline, or a second stop signal.
fn wait_in_grace(
    deadline: Instant,
    signals: &StopSignals,
    mut done: impl FnMut() -> bool,
) -> Grace {
    let step = Duration::from_millis(20);
    loop {
        if done() {
            return Grace::Done;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Grace::Over;
        }
        if let Some(signal) = signals.within(left.min(step)) {
            tracing::warn!("signal {signal} again: ending the grace period");
            return Grace::Signal;
        }
    }
}

/// Stops the front end within the grace period: it stops taking requests,
/// and those in flight (then destages in flight) finish, their replies
/// going out. At the end of the grace period, or at a second signal, what
/// still waits is answered with an error; a thread blocked in a backing
/// call that does not answer is left behind (the process exits without it).
pub(super) fn stop_front_end(
    front_end: Box<dyn FrontEnd>,
    cache: &Cache,
    grace: Duration,
    signals: &StopSignals,
) {
    super::endpoints::notify_stopping();
    let deadline = Instant::now() + grace;
    // Dirty pages stay (documented): destaging them now would hold the
    // stop for as long as they take.
    cache.stop_destaging();
    let stopper = match std::thread::Builder::new()
        .name("wcache-stop".into())
        .spawn(move || front_end.stop())
    {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("cannot start the stop thread ({e}); not waiting for requests");
            cache.fail_waiting();
            return;
        }
    };
    let mut ended = wait_in_grace(deadline, signals, || stopper.is_finished());
    if ended == Grace::Done {
        // Destages in flight may finish too; one stuck in a backing call does not hold the stop.
        ended = wait_in_grace(deadline, signals, || cache.is_idle());
        if ended == Grace::Done {
            return;
        }
    }
    if ended == Grace::Over {
        tracing::warn!("grace period of {:.1} s over", grace.as_secs_f64());
    }
    let failed_count = cache.fail_waiting();
    tracing::warn!(
        "answered {failed_count} writes still waiting for room with an error \
         (none was acknowledged); refusing new requests"
    );
    let after = Instant::now() + STOP_AFTER_GRACE;
    while !stopper.is_finished() && Instant::now() < after {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !stopper.is_finished() {
        tracing::warn!(
            "requests still wait on a backing that does not answer: not waiting for them"
        );
    }
}
