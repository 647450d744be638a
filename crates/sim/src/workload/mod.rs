//! Workloads: who sends requests to the cache, and when.
//!
//! A workload is event driven like everything in the simulator: it says when its
//! next request arrives, hands requests out once their time has come, and hears
//! about completions (closed-loop workloads issue the next request then).
//! Workloads are deterministic from their seed and never look at the cache.

use wcache_core::time::Nanos;

/// Read or write, as the application asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqKind {
    Read,
    Write,
}

/// One application request, in bytes of a volume's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// Unique within one workload run; returned on completion.
    pub id: u64,
    pub volume: u32,
    pub kind: ReqKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// The application waits for this write (sync/FUA); traces that know say so.
    pub sync: bool,
    /// Process or stream that issued it (stream number, trace pid, ...).
    pub issuer: u32,
}

/// A source of requests.
pub trait Workload: Send {
    /// When the next request becomes available; `None` if nothing is pending
    /// until a completion arrives (closed loop) or the workload is finished.
    fn next_arrival(&self) -> Option<Nanos>;
    /// Hand out one request whose arrival time is `<= now`, if any.
    fn poll(&mut self, now: Nanos) -> Option<IoRequest>;
    /// A request handed out earlier has completed at `now`.
    fn complete(&mut self, now: Nanos, id: u64);
    /// True when no request will ever be handed out again.
    fn finished(&self) -> bool;
    /// Bytes of address space per volume the workload touches (volume sizes).
    fn volume_sizes_bytes(&self) -> Vec<u64>;
    fn name(&self) -> String;
}
