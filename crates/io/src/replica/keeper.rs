//! `--on-peer-lost write-through`: while the peer is not connected and in
//! sync, the cache drains its dirty pages and takes writes through to the
//! backing; once the peer is back in sync, write-back again. One thread
//! watches the link and changes the policy online (`Operator::set`), as an
//! operator would. Writes acknowledged between the link's loss and the end
//! of the drain are on this host only (`docs/consistency.md`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wcache_core::WritePolicyKind;

use super::{LinkState, Mirror};
use crate::ops::Operator;

/// How often the link is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The thread that keeps the write policy in step with the link.
pub struct PolicyKeeper {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl PolicyKeeper {
    /// Starts watching; `configured` is the policy while the peer is in sync.
    pub fn start(
        operator: Operator,
        mirror: Arc<Mirror>,
        configured: WritePolicyKind,
    ) -> PolicyKeeper {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("wcache-replica-policy".into())
            .spawn(move || keep(&operator, &mirror, configured, &flag))
            .expect("spawn the replication policy thread");
        PolicyKeeper {
            stop,
            handle: Some(handle),
        }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for PolicyKeeper {
    fn drop(&mut self) {
        self.stop();
    }
}

fn keep(operator: &Operator, mirror: &Mirror, configured: WritePolicyKind, stop: &AtomicBool) {
    let mut in_force = configured;
    while !stop.load(Ordering::Acquire) {
        let in_sync = mirror.link_state() == LinkState::Connected;
        let want = if in_sync {
            configured
        } else {
            WritePolicyKind::WriteThrough
        };
        if want != in_force {
            // A drain stops when the peer is back in sync or the cache stops.
            let mut go_on = |_: &crate::ops::FlushProgress| {
                !stop.load(Ordering::Acquire)
                    && (want == configured || mirror.link_state() != LinkState::Connected)
            };
            match operator.set("write-policy", want.name(), &mut go_on) {
                Ok(_) => {
                    in_force = want;
                    if in_sync {
                        tracing::info!("replication: the peer is in sync again: {}", want.name());
                    } else {
                        tracing::warn!("replication: the peer is away: dirty pages drained; writes go through to the backing until it is back in sync");
                    }
                }
                Err(e) => tracing::debug!("replication: write policy not changed yet: {e}"),
            }
        }
        std::thread::sleep(LOOK_EVERY);
    }
}
